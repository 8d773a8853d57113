"""Turn one decoded row into a Prompt: pick the prompt column, validate the turns, keep the wanted ones.

Mappings (``input.mapping``):

- ``messages``: OpenAI chat form, ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``.
- ``conversations``: ShareGPT form, ``[{"from": "human"|"gpt"|"system", "value": str}, ...]``; turns in
  ``role``/``content`` form are accepted too (SpecForge writes those), and ``user``, ``assistant`` and
  ``chatgpt`` are accepted as ``from`` values.
- ``prompt``: a plain text column.
- ``auto``: per row, the first of those fields that is present and not null.

Turns kept (``input.conversation_turns``, by default ``all``): ``first`` keeps the system turns before the first
user turn and that user turn; ``history`` keeps every turn up to and including the last user turn (trailing
assistant turns are dropped); ``all`` keeps the leading system turns and the first user turn as the prompt and
every later user turn (original assistant turns dropped) as ``Prompt.followups``, answered one after the other by
the dispatcher. ``input.system_prompt`` is prepended when the kept turns hold no system turn. Every turn is
validated (an object with a known role and string content); kept user turns must not be blank.
A row with several user turns says how many in ``meta["user_turns"]`` (whatever is kept), which the feed counts
for the start line and the summary.

A chat row becomes ``Prompt(messages=...)`` with only ``role`` and ``content`` per turn, and keeps the
original row in ``meta["row"]`` for export. That costs memory per prompt held, not per dataset: as Python
objects a row takes several times its JSON size (200k ShareGPT prompts of ~215 JSON bytes, kept in a list,
take ~340 MB, ~1.7 KB each), so only the prompts queued or in flight should be held.

A text row becomes ``Prompt(text=...)``, sent verbatim (completion APIs) or as one user message (chat
APIs); with ``input.system_prompt`` set it becomes ``[system, user]`` messages instead, since a system
prompt only exists in chat form.
"""

from __future__ import annotations

from typing import Any

from tokenmill.config import AUTO_ID_COLUMN, AUTO_ID_FIELD, InputSpec
from tokenmill.records import Message, Prompt
from tokenmill.sources.thinking import row_thinking

_OPENAI_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
_SHAREGPT_ROLES = {**_OPENAI_ROLES, "human": "user", "gpt": "assistant", "chatgpt": "assistant"}
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}


USER_TURNS = "user_turns"  # Prompt.meta key: the row's user turns, set when it has more than one
FIELDS = "fields"  # Prompt.meta key: the row's own columns recorded with its completion (input.keep_fields)


class RowProblem(ValueError):
    """Why a row cannot become a prompt (a reason for the user, without the row's location)."""


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def row_id(row: dict[str, Any], field: str) -> str:
    """The id in ``row[field]``: a non-empty string, or an integer (as its decimal string)."""
    value = row.get(field)
    if value is None:
        raise RowProblem(f"missing id field {field!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise RowProblem(f"id field {field!r} must be a string or an integer, got {json_type(value)}")
    if not value or value.isspace():
        raise RowProblem(f"id field {field!r} is empty")
    return value


def mapping_fields(spec: InputSpec) -> dict[str, str]:
    """The field each mapping reads, in the order ``auto`` tries them."""
    return {"messages": spec.messages_field, "conversations": spec.conversations_field, "prompt": spec.prompt_field}


class RowMapper:
    """Turns rows into prompts under one InputSpec (the field choices are worked out once)."""

    def __init__(self, spec: InputSpec) -> None:
        fields = mapping_fields(spec)
        self._mapping = spec.mapping
        self._candidates = list(fields.items()) if spec.mapping == "auto" else [(spec.mapping, fields[spec.mapping])]
        self._system = spec.system_prompt
        self._turns = spec.conversation_turns
        self._thinking_field = spec.thinking_field
        self._keep = spec.keep_fields
        ids = AUTO_ID_COLUMN if spec.id_field == AUTO_ID_FIELD else spec.id_field
        self._own = {ids, *fields.values()}  # the id and prompt columns are the record's already

    def prompt(self, row: dict[str, Any], pid: str, source: str) -> Prompt:
        """The prompt a row describes; raises RowProblem naming the field and what is wrong with it."""
        kind, field, value = self._pick(row)
        kept = self._fields(row)
        if kind == "prompt":
            text = _text(value, field)
            text_meta = {FIELDS: kept} if kept else None
            if self._system is None:
                return Prompt(id=pid, text=text, source=source, meta=text_meta)
            messages = [{"role": "system", "content": self._system}, {"role": "user", "content": text}]
            return Prompt(id=pid, messages=messages, source=source, meta=text_meta)
        turns = _turns(value, field, sharegpt=kind == "conversations")
        messages = _select(turns, field, self._turns)
        meta: dict[str, Any] = {"row": row}
        if kept:
            meta[FIELDS] = kept
        users = sum(1 for t in turns if t["role"] == "user")
        if users > 1:
            meta[USER_TURNS] = users  # counted by the feed: rows with several user turns, whatever is kept
        if self._system is not None and all(m["role"] != "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self._system})
        followups = None
        if self._turns == "all":
            first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
            followups = [m for m in messages[first_user + 1 :] if m["role"] == "user"]
            messages = messages[: first_user + 1]
        return Prompt(id=pid, messages=messages, source=source, meta=meta, followups=followups or None)

    def _fields(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row's own columns to record (``input.keep_fields``); a listed column the row lacks is left out."""
        if self._keep == "all":
            return {k: v for k, v in row.items() if k not in self._own}
        return {k: row[k] for k in self._keep if k in row}

    def thinking(self, row: dict[str, Any]) -> bool | None:
        """The row's own thinking mode (``input.thinking_field``); None when there is no such column or the row
        leaves it out; RowProblem for a value that is not true/false or on/off."""
        field = self._thinking_field
        if field is None:
            return None
        try:
            return row_thinking(row.get(field), field)
        except ValueError as exc:
            raise RowProblem(str(exc)) from None

    def _pick(self, row: dict[str, Any]) -> tuple[str, str, object]:
        """(mapping kind, field name, value) for this row: the first candidate field present and not null."""
        for kind, field in self._candidates:
            value = row.get(field)
            if value is not None:
                return kind, field, value
        if self._mapping != "auto":
            raise RowProblem(f"missing field {self._candidates[0][1]!r} (input.mapping is {self._mapping!r})")
        wanted = ", ".join(repr(f) for _, f in self._candidates)
        raise RowProblem(
            f"missing field: the row has none of {wanted} (or they are null); set input.mapping and the *_field names"
        )


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise RowProblem(f"field {field!r} must be a string, got {json_type(value)}")
    if not value or value.isspace():
        raise RowProblem(f"empty prompt: field {field!r} is empty")
    return value


def _turns(value: object, field: str, sharegpt: bool) -> list[Message]:
    """Every turn as ``{"role", "content"}``, validated."""
    if not isinstance(value, list):
        raise RowProblem(f"field {field!r} must be an array of turns, got {json_type(value)}")
    if not value:
        raise RowProblem(f"empty conversation: field {field!r} has no turns")
    return [_turn(entry, f"{field}[{i}]", sharegpt) for i, entry in enumerate(value)]


def _turn(entry: object, where: str, sharegpt: bool) -> Message:
    if not isinstance(entry, dict):
        raise RowProblem(f"{where} must be an object, got {json_type(entry)}")
    # Parquet and datasets fill absent struct fields with null, so null counts as absent.
    if sharegpt and entry.get("from") is not None:
        role_key, content_key = "from", "value"
    else:
        role_key, content_key = "role", "content"
    roles = _SHAREGPT_ROLES if sharegpt else _OPENAI_ROLES
    role, content = entry.get(role_key), entry.get(content_key)
    if role is None:
        raise RowProblem(f"{where} has no {'from' if sharegpt else 'role'!r}")
    if not isinstance(role, str):
        raise RowProblem(f"{where}.{role_key} must be a string, got {json_type(role)}")
    if role not in roles:
        raise RowProblem(f"{where} has unknown role {role!r} (expected one of: {', '.join(roles)})")
    if content is None:
        raise RowProblem(f"{where} has no {content_key!r}")
    if not isinstance(content, str):
        raise RowProblem(f"{where}.{content_key} must be a string, got {json_type(content)}")
    return {"role": roles[role], "content": content}


def _select(turns: list[Message], field: str, mode: str) -> list[Message]:
    """``first``: leading system turns + the first user turn; ``history``: all up to the last user turn;
    ``all``: leading system turns + everything from the first user turn to the last (a greeting before the
    first user turn is not the model's answer to anything)."""
    users = [i for i, turn in enumerate(turns) if turn["role"] == "user"]
    if not users:
        raise RowProblem(f"field {field!r} has no user turn")
    leading = [i for i in range(users[0]) if turns[i]["role"] == "system"]
    if mode == "first":
        kept = [*leading, users[0]]
    elif mode == "all":
        kept = [*leading, *range(users[0], users[-1] + 1)]
    else:
        kept = list(range(users[-1] + 1))
    for i in kept:
        content = turns[i]["content"]
        if turns[i]["role"] == "user" and (not content or content.isspace()):
            raise RowProblem(f"empty prompt: {field}[{i}] (a user turn) is empty")
    return [turns[i] for i in kept]


_POLICY = {
    "all": "every user turn regenerated, each sent with the answers generated before it",
    "first": "only the first user turn answered (later turns left out of the record)",
    "history": "the turns up to the last user turn sent as one prompt, one answer",
}


def conversation_policy(turns: str) -> str:
    """What a job does with rows of several user turns, as the start line and the summary say it."""
    return f"{_POLICY.get(turns, turns)} (input.conversation_turns: {turns})"
