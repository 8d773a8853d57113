"""The read side of a completion record: :class:`CompletionRecord`, one shard line as every reader sees it.

``export``, ``inspect``, ``report``, ``regenerate`` and ``verify`` read records through this type, not as dicts.
:meth:`CompletionRecord.from_json` reads what any version wrote: a missing or mistyped field is empty, a
``completion: null`` is an empty answer, and keys it does not know are kept for :meth:`~CompletionRecord.to_json`.

The record holds one :class:`Answer` (the record's own completion and totals) and, for a multi-turn regeneration
(``regenerate: all``), one :class:`Answer` per turn. Its conversation is built in one place:
:meth:`~CompletionRecord.conversation` (every answer in place) and :meth:`~CompletionRecord.turn_conversations`
(each turn's context as it was sent, ending with that turn's answer).

Ids keep their JSON type (an integer id in the input stays an integer); :func:`id_key` is the one canonical
string every set of ids is keyed on: an integer and its decimal string are the same prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenmill.records import Message, turn_json

RecordId = str | int
"""An id as the input spelled it: a string, or an integer (never a bool)."""

LENGTH = "length"  # the finish reason of an answer cut at max_tokens

_ANSWER_KEYS = (
    "completion",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "server",
    "latency_s",
    "reasoning_content",
    "prompt_token_ids",
    "completion_token_ids",
    "quality",
)
_RECORD_KEYS = (
    "id",
    "prompt",
    "model",
    "sampling",
    "attempts",
    "started_at",
    "finished_at",
    "turns",
    "thinking",
    "primary_id",
    "sample",
    "origin",
    "fields",
    "status",
    "round",
    *_ANSWER_KEYS,
)


def id_key(value: object) -> str:
    """The canonical string of an id: a string as it is, an integer as its decimal string."""
    return value if isinstance(value, str) else str(value)


def record_id(value: object) -> RecordId | None:
    """``value`` as an id: a string or an integer (not a bool); None for anything else."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _ids(value: object) -> list[int] | None:
    return value if isinstance(value, list) else None


@dataclass(frozen=True, slots=True)
class Answer:
    """One generated assistant turn: a single-turn record's own answer, or one turn of a multi-turn record."""

    completion: str | None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    server: str | None = None
    latency_s: float | None = None
    reasoning_content: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    quality: dict[str, Any] | None = None  # the signals as written (tokenmill.quality.signals)

    @property
    def text(self) -> str:
        """The answer's text (``""`` for a ``completion: null``)."""
        return self.completion or ""

    @property
    def cut(self) -> bool:
        """Whether the answer was cut at max_tokens."""
        return self.finish_reason == LENGTH

    @property
    def has_ids(self) -> bool:
        """Whether the server's prompt and completion token ids were captured."""
        return bool(self.completion_token_ids) and bool(self.prompt_token_ids)

    def message(self, reasoning: bool) -> Message:
        """The answer as an assistant message (with its reasoning when ``reasoning`` and it has any)."""
        msg: Message = {"role": "assistant", "content": self.text}
        if reasoning and self.reasoning_content:
            msg["reasoning_content"] = self.reasoning_content
        return msg

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        return cls(
            completion=_str(data.get("completion")),
            finish_reason=_str(data.get("finish_reason")),
            prompt_tokens=_int(data.get("prompt_tokens")),
            completion_tokens=_int(data.get("completion_tokens")),
            server=_str(data.get("server")),
            latency_s=_float(data.get("latency_s")),
            reasoning_content=_str(data.get("reasoning_content")),
            prompt_token_ids=_ids(data.get("prompt_token_ids")),
            completion_token_ids=_ids(data.get("completion_token_ids")),
            quality=_dict(data.get("quality")),
        )

    def turn_json(self) -> dict[str, Any]:
        """The JSON form of one entry of ``turns`` (as :class:`~tokenmill.records.Turn` writes it)."""
        return turn_json(self)


def _messages(value: object) -> list[Message] | str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict)]
    return ""


@dataclass(frozen=True, slots=True)
class CompletionRecord:
    """A completion record as read back from a shard (see the module docstring)."""

    id: RecordId
    prompt: list[Message] | str
    answer: Answer  # the record's own completion, finish reason and (for a multi-turn record) token totals
    turns: tuple[Answer, ...] = ()  # regenerate: all — one per user turn, in order; () for a single turn
    model: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    attempts: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    thinking: bool | None = None  # enable_thinking as sent; None: nothing sent
    primary_id: RecordId | None = None  # samples > 1: the input row's id
    sample: int | None = None  # samples > 1: k of {primary_id}_gen{k}
    origin: dict[str, Any] | None = None
    fields: dict[str, Any] | None = None  # the input row's own columns (input.keep_fields)
    round: int | None = None  # the regeneration round the live answer comes from (None: the job's own)
    status: str = "ok"
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept for to_json

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompletionRecord:
        """The record ``data`` (a decoded shard line) holds, read leniently."""
        rid = record_id(data.get("id"))
        turns = data.get("turns")
        thinking = data.get("thinking")
        return cls(
            id=rid if rid is not None else "",
            prompt=_messages(data.get("prompt")),
            answer=Answer.from_json(data),
            turns=tuple(Answer.from_json(t) for t in turns if isinstance(t, dict)) if isinstance(turns, list) else (),
            model=_str(data.get("model")),
            sampling=_dict(data.get("sampling")) or {},
            attempts=_int(data.get("attempts")),
            started_at=_float(data.get("started_at")),
            finished_at=_float(data.get("finished_at")),
            thinking=thinking if isinstance(thinking, bool) else None,
            primary_id=record_id(data.get("primary_id")),
            sample=_int(data.get("sample")),
            origin=_dict(data.get("origin")),
            fields=_dict(data.get("fields")),
            round=_int(data.get("round")),
            status=_str(data.get("status")) or "ok",
            extra={k: v for k, v in data.items() if k not in _RECORD_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form, keyed as :class:`~tokenmill.records.Completion` writes it (``round`` when read from a
        regeneration round; unknown keys kept)."""
        a = self.answer
        out: dict[str, Any] = {
            "id": self.id,
            "prompt": self.prompt,
            "completion": a.completion,
            "finish_reason": a.finish_reason,
            "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens,
            "model": self.model,
            "sampling": self.sampling,
            "server": a.server,
            "latency_s": a.latency_s,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "reasoning_content": a.reasoning_content,
            "prompt_token_ids": a.prompt_token_ids,
            "completion_token_ids": a.completion_token_ids,
            "turns": [t.turn_json() for t in self.turns] if self.turns else None,
            "quality": a.quality,
            "thinking": self.thinking,
            "primary_id": self.primary_id,
            "sample": self.sample,
            "origin": self.origin,
            "fields": self.fields,
            "status": self.status,
        }
        if self.round is not None:
            out["round"] = self.round
        out.update(self.extra)
        return out

    def read_json(self) -> dict[str, Any]:
        """The JSON form as readers see it: :meth:`to_json` with the record's finish reason as read (``length``
        when any turn was cut, for records written before the record said so too)."""
        out = self.to_json()
        out["finish_reason"] = self.finish_reason
        return out

    # -- what readers ask --

    @property
    def key(self) -> str:
        """The canonical id (:func:`id_key`): what sets of ids are keyed on."""
        return id_key(self.id)

    @property
    def group_key(self) -> str:
        """The canonical id of the prompt this answer belongs to: its primary id with samples, else its own."""
        return id_key(self.id if self.primary_id is None else self.primary_id)

    @property
    def answers(self) -> tuple[Answer, ...]:
        """The generated assistant turns in order (the record's own answer for a single-turn record)."""
        return self.turns or (self.answer,)

    @property
    def finish_reason(self) -> str | None:
        """``length`` when any turn was cut at max_tokens (also for records written before the record said so),
        else the record's own (its last turn's)."""
        if any(t.cut for t in self.turns):
            return LENGTH
        return self.answer.finish_reason

    @property
    def completion_tokens(self) -> int | None:
        return self.answer.completion_tokens

    @property
    def prompt_tokens(self) -> int | None:
        return self.answer.prompt_tokens

    @property
    def samples(self) -> int:
        """How many answers the prompt has (``sampling.samples``; 1 for a job of one answer per prompt)."""
        want = _int(self.sampling.get("samples"))
        return want if want is not None and want > 0 else 1

    def given(self) -> list[Message]:
        """The prompt as messages (a plain-text prompt as one user message), role and content only."""
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return [{"role": m.get("role"), "content": m.get("content")} for m in self.prompt]

    def conversation(self, reasoning: bool = True) -> list[Message]:
        """The prompt's messages with every generated answer in place (each with its reasoning when
        ``reasoning``): after each answered user turn for a multi-turn record, at the end otherwise."""
        given = self.given()
        if not self.turns:
            return [*given, self.answer.message(reasoning)]
        out: list[Message] = []
        k = 0
        for msg in given:
            out.append(msg)
            if msg["role"] == "user" and k < len(self.turns):
                out.append(self.turns[k].message(reasoning))
                k += 1
        return out

    def turn_conversations(self) -> list[list[Message]]:
        """One conversation per generated turn: the context the server was sent for it (earlier answers as the
        run sent them, content only) ending with that turn's answer (with its reasoning)."""
        given = self.given()
        if not self.turns:
            return [[*given, self.answer.message(True)]]
        out: list[list[Message]] = []
        history: list[Message] = []
        for msg in given:
            history.append(msg)
            if msg["role"] == "user" and len(out) < len(self.turns):
                answer = self.turns[len(out)]
                out.append([*history, answer.message(True)])
                history.append(answer.message(False))
        return out
