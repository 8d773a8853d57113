"""Token rows for drafter training (``export --format tokens``).

A row is ``{"id", "input_ids", "loss_mask", "token_source", "finish_reason"}``: flat integer lists of one length,
the mask 0 on the prompt, the chat headers and the user turns and 1 on every regenerated assistant turn's tokens,
its end-of-turn token included — the pre-tokenized rows SpecForge (``data.prompts_path``) and vLLM speculators
read. The ids are the server's own when the run captured them (``save_token_ids``; ``token_source: "server"``),
else the conversation rendered through the model's chat template and tokenised (``"template"``,
:mod:`tokenmill.export.masks`). ``per_turn`` writes one row per assistant turn (``{id}_turn{k}``, with
``primary_id`` and ``turn``): the turn's context as it was sent, earlier answers without their reasoning, only
that turn supervised. ``max_length`` cuts rows; a row left with no supervised token is left out with its reason,
never dropped unsaid.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.backends.templating import ChatTemplater
from tokenmill.config import ExportSpec
from tokenmill.errors import ConfigError, PermanentError
from tokenmill.export.conversation import answers as record_answers
from tokenmill.export.conversation import turn_conversations, whole_conversation
from tokenmill.export.masks import prompt_masked, render_masked
from tokenmill.export.usage import UsageCheck
from tokenmill.output.identity import read_record
from tokenmill.records import Message
from tokenmill.storage.place import is_url

# -- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenOptions:
    """How token rows are built."""

    tokenizer: str | None = None  # a local tokenizer directory (default: the job's `tokenizer`)
    per_turn: bool = False
    max_length: int | None = None
    max_disagree: float = ExportSpec().usage_max_disagree  # the usage check's share (tokenmill.export.usage)


@dataclass(slots=True)
class TokenCounts:
    """Where the rows' ids came from and what ``max_length`` cut (written into the export's counts)."""

    rows: int = 0
    from_server: int = 0
    from_template: int = 0
    rows_cut: int = 0
    tokens_cut: int = 0
    supervised_cut: int = 0
    supervised: int = 0
    tokens: int = 0
    end_of_turn_added: int = 0
    turns_left_out: Counter[str] = field(default_factory=Counter)  # per-turn rows left out, by reason
    notes: Counter[str] = field(default_factory=Counter)
    usage: UsageCheck = field(default_factory=UsageCheck)  # rendered counts against the servers' usage counts
    workers: int = 1  # processes that built the rows (tokenmill.export.parallel)

    def merge(self, other: TokenCounts) -> None:
        """Add the counts of another part of the export (a worker's batch of records)."""
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.turns_left_out.update(other.turns_left_out)
        self.notes.update(other.notes)
        self.usage.merge(other.usage)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "rows": self.rows,
            "tokens": self.tokens,
            "supervised_tokens": self.supervised,
            "from_server_ids": self.from_server,
            "from_chat_template": self.from_template,
            "end_of_turn_added": self.end_of_turn_added,
            "rows_cut": self.rows_cut,
            "tokens_cut": self.tokens_cut,
            "supervised_tokens_cut": self.supervised_cut,
            "turn_rows_left_out": dict(sorted(self.turns_left_out.items())),
            "notes": dict(sorted(self.notes.items())),
            "usage": self.usage.as_dict(),
        }

    def render(self) -> str:
        lines = [
            f"token rows {self.rows:,}: {self.tokens:,} tokens, {self.supervised:,} supervised; ids from the "
            f"server {self.from_server:,}, from the chat template {self.from_template:,}"
        ]
        if self.end_of_turn_added:
            lines.append(
                f"  end-of-turn token added after {self.end_of_turn_added:,} answers the server stopped without it"
            )
        if self.rows_cut:
            lines.append(
                f"  cut at --max-length: {self.rows_cut:,} rows, {self.tokens_cut:,} tokens "
                f"({self.supervised_cut:,} of them supervised)"
            )
        lines += [f"  turn rows left out {n:,}: {reason}" for reason, n in sorted(self.turns_left_out.items())]
        lines += [f"  {n:,} records: {note}" for note, n in sorted(self.notes.items())]
        if self.usage.compared:
            lines.append(self.usage.render())
        return "\n".join(lines)


_SUMMED = ("rows", "from_server", "from_template", "rows_cut", "tokens_cut", "supervised_cut", "supervised", "tokens",
           "end_of_turn_added")  # fmt: skip


class LeftOut(Exception):
    """A record that yields no token row, with the reason the export's counts show."""


TEXT_APIS = ("openai-completions", "sglang-generate")  # a plain-text prompt is sent as it is, no chat template


def job_setting(target: str | Path, key: str) -> str | None:
    """A string setting (`tokenizer`, `api`) of the job an output directory records (None for a prefix, or a
    job without it)."""
    text = str(target)
    if is_url(text) or not Path(text).is_dir():
        return None
    record = read_record(Path(text))
    return record.setting(key) if record is not None else None


def plain_text(rec: dict[str, Any], api: str | None) -> bool:
    """Whether the record's prompt went to the server as plain text (no chat template)."""
    return isinstance(rec.get("prompt"), str) and api in TEXT_APIS


Built = tuple[list[int], list[int], str, int | None]  # a row's ids, mask, source ("server"/"template"), turn


def _ids(values: Any) -> list[int]:
    """A record's token ids as a list of ints: checked and converted in C when they are JSON integers (as every
    record holds them), else each one taken through ``int``."""
    try:
        return array("q", values).tolist()
    except (TypeError, OverflowError):
        return [int(t) for t in values]


def _count(answer: dict[str, Any], key: str) -> int | None:
    value = answer.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class TokenRows:
    """Builds the token rows of records; the tokenizer is loaded on first need (server ids need none unless an
    end-of-turn token must be added or a record has no ids)."""

    def __init__(
        self,
        opts: TokenOptions,
        job_tokenizer: str | None = None,
        api: str | None = None,
        templater: ChatTemplater | None = None,
    ) -> None:
        self.opts = opts
        self.tokenizer = opts.tokenizer or job_tokenizer
        self.api = api
        self.counts = TokenCounts()
        self.counts.usage = UsageCheck(tokenizer=str(self.tokenizer or ""), max_share=opts.max_disagree)
        self._templater: ChatTemplater | None = templater
        self._eot: tuple[int | None] | None = None  # the end-of-turn id, once looked up

    def templater(self, why: str) -> ChatTemplater:
        if self._templater is None:
            if not self.tokenizer:
                raise ConfigError(
                    f"the tokens export needs the model's tokenizer {why}: pass --tokenizer DIR (the model's "
                    "directory with tokenizer.json and its chat template), or set `tokenizer:` in the job"
                )
            self._templater = ChatTemplater(self.tokenizer)
        return self._templater

    def rows(self, rec: dict[str, Any]) -> list[dict[str, Any]]:
        """The token rows of one record (one, or one per turn); :class:`LeftOut` when none is left."""
        rid = rec["id"]  # the id as the record holds it (its JSON type kept)
        answers = record_answers(rec)
        built = self._build(rec, answers)
        self._check_usage(rid, rec, answers, built)
        out: list[dict[str, Any]] = []
        reasons: list[str] = []
        for ids, mask, source, turn in built:
            reason = self._cut(ids, mask)
            if reason is not None:
                reasons.append(reason)
                if self.opts.per_turn and len(built) > 1:
                    self.counts.turns_left_out[reason] += 1
                continue
            row: dict[str, Any] = {"id": rid if turn is None else f"{rid}_turn{turn}"}
            if turn is not None:
                row["primary_id"] = rid
                row["turn"] = turn
            row["input_ids"] = ids
            row["loss_mask"] = mask
            row["token_source"] = source
            row["finish_reason"] = answers[turn].get("finish_reason") if turn is not None else rec.get("finish_reason")
            row["thinking"] = rec.get("thinking")  # the thinking mode as sent (null: none)
            self.counts.rows += 1
            self.counts.tokens += len(ids)
            self.counts.supervised += sum(mask)
            self.counts.from_server += source == "server"
            self.counts.from_template += source == "template"
            out.append(row)
        if not out:
            raise LeftOut(reasons[0] if reasons else "no assistant turn to supervise")
        return out

    def _build(self, rec: dict[str, Any], answers: list[dict[str, Any]]) -> list[Built]:
        """Each row's (ids, mask, where the ids came from, turn or None) before ``max_length``."""
        has_ids = all(a.get("completion_token_ids") and a.get("prompt_token_ids") for a in answers)
        built: list[Built] = []
        if self.opts.per_turn:
            convos = turn_conversations(rec) if not has_ids else [[] for _ in answers]
            for k, answer in enumerate(answers):
                if has_ids:
                    ids, mask = self._server_turn(answer)
                    built.append((ids, mask, "server", k))
                else:
                    ids, mask = self._rendered(convos[k], last_only=True)
                    built.append((ids, mask, "template", k))
        elif has_ids:
            joined = self._server_joined(answers) or self._server_last(rec, answers)
            if joined is not None:
                built.append((*joined, "server", None))
            else:
                self.counts.notes["multi-turn server ids do not extend one another: rendered instead"] += 1
                why = "for multi-turn records whose turns' ids do not extend one another (or use --per-turn)"
                built.append((*self._rendered(whole_conversation(rec), last_only=False, why=why), "template", None))
        elif plain_text(rec, self.api):
            built.append((*self._plain(rec), "template", None))
        else:
            built.append((*self._rendered(whole_conversation(rec), last_only=False), "template", None))
        return built

    def _check_usage(self, rid: str, rec: dict[str, Any], answers: list[dict[str, Any]], built: list[Built]) -> None:
        """The rendered rows' counts against the servers' usage counts (:mod:`tokenmill.export.usage`)."""
        for ids, mask, source, turn in built:
            if source != "template":
                continue
            supervised = sum(mask)
            context = len(ids) - supervised
            if turn is not None:
                answer = answers[turn]
                self.counts.usage.add(
                    f"{rid}_turn{turn}", supervised, _count(answer, "completion_tokens"),
                    (context, _count(answer, "prompt_tokens")),
                )  # fmt: skip
                continue
            counts = [_count(a, "completion_tokens") for a in answers]
            counted = None if None in counts else sum(c or 0 for c in counts)
            one = not rec.get("turns")
            self.counts.usage.add(rid, supervised, counted, (context, _count(rec, "prompt_tokens")) if one else None)

    def check_usage(self, rec: dict[str, Any]) -> None:
        """Compare ``rec``'s counts rendered through the chat template (whatever ids it carries) with its usage
        counts (``inspect --tokens``); :class:`LeftOut` when the template cannot render it."""
        if plain_text(rec, self.api):
            built: list[Built] = [(*self._plain(rec), "template", None)]
        else:
            built = [(*self._rendered(whole_conversation(rec), last_only=False), "template", None)]
        self._check_usage(str(rec["id"]), rec, record_answers(rec), built)

    # -- from the server's ids --

    def _completion(self, answer: dict[str, Any]) -> list[int]:
        """The answer's ids, ending with the end-of-turn token when the answer stopped (a server that leaves the
        stop token out of its ids gets it added, so the drafter learns where a turn ends, as trainers mask it)."""
        ids = _ids(answer["completion_token_ids"])
        if answer.get("finish_reason") != "stop" or not self.tokenizer:
            return ids
        eot_id = self._end_of_turn()
        if eot_id is not None and (not ids or ids[-1] != eot_id):
            ids.append(eot_id)
            self.counts.end_of_turn_added += 1
        return ids

    def _end_of_turn(self) -> int | None:
        """The end-of-turn token's id (the tokenizer's end of sequence), looked up once."""
        if self._eot is None:
            templater = self.templater("to add the end-of-turn token")
            eot = templater.eos_token
            self._eot = (templater.token_id(eot) if eot else None,)
        return self._eot[0]

    def _server_turn(self, answer: dict[str, Any]) -> tuple[list[int], list[int]]:
        prompt = _ids(answer["prompt_token_ids"])
        completion = self._completion(answer)
        return prompt + completion, [0] * len(prompt) + [1] * len(completion)

    def _server_joined(self, answers: list[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
        """Every turn in one row when each turn's prompt ids extend the ids before it; else None."""
        ids: list[int] = []
        mask: list[int] = []
        for answer in answers:
            prompt = _ids(answer["prompt_token_ids"])
            if prompt[: len(ids)] != ids:
                return None
            new = prompt[len(ids) :]
            completion = self._completion(answer)
            ids += new + completion
            mask += [0] * len(new) + [1] * len(completion)
        return ids, mask

    def _server_last(self, rec: dict[str, Any], answers: list[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
        """Every turn in one row from the last turn's ids (its prompt holds the earlier answers as the server
        tokenised them from their text), the earlier answers located by the chat template: when the template
        renders that prompt to the server's very ids; else None."""
        if not self.tokenizer:
            return None
        templater = self.templater("to find earlier answers in a multi-turn prompt")
        history = turn_conversations(rec)[-1][:-1]
        try:
            ids, mask = prompt_masked(templater, history)
        except PermanentError:
            return None
        last = answers[-1]
        if ids != _ids(last["prompt_token_ids"]):
            return None
        completion = self._completion(last)
        return ids + completion, mask + [1] * len(completion)

    # -- through the chat template --

    def _rendered(
        self, messages: list[Message], *, last_only: bool, why: str = "to render records that carry no server token ids"
    ) -> tuple[list[int], list[int]]:
        templater = self.templater(why)
        try:
            return render_masked(templater, messages, last_only=last_only)
        except PermanentError as exc:
            raise LeftOut(f"the chat template cannot render it ({exc})") from exc

    def _plain(self, rec: dict[str, Any]) -> tuple[list[int], list[int]]:
        templater = self.templater("to tokenise records that carry no server token ids")
        prompt = templater.encode(str(rec["prompt"]))
        answer = templater.encode(rec.get("completion") or "")
        return prompt + answer, [0] * len(prompt) + [1] * len(answer)

    def _cut(self, ids: list[int], mask: list[int]) -> str | None:
        limit = self.opts.max_length
        if limit is not None and len(ids) > limit:
            self.counts.rows_cut += 1
            self.counts.tokens_cut += len(ids) - limit
            self.counts.supervised_cut += sum(mask[limit:])
            del ids[limit:], mask[limit:]
            if not any(mask):
                return f"no supervised token within --max-length {limit}"
        if not ids:
            return "no token ids"
        if not any(mask):
            return "no supervised token"
        return None
