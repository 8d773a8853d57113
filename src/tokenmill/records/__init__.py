"""The records on the hot path: a Prompt in, a Completion or a Failure out, and their JSONL encoding.

One line of a shard is ``orjson.dumps(record) + b"\\n"``; every record carries ``id`` and ``status``
(``"ok"`` for a completion, ``"failed"`` for a failure) so any line can be decoded on its own. A record's ``id``
keeps the input's JSON type (an integer id is written as an integer); sets of ids key on the canonical string
(:func:`tokenmill.records.read.id_key`). Readers read a completion back as
:class:`tokenmill.records.read.CompletionRecord`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

Message = dict[str, Any]
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # the thinking block's markers (Qwen3, DeepSeek-R1 and others)


@dataclass(slots=True)
class Prompt:
    """One unit of work: a stable id and what is sent (chat messages or plain text)."""

    id: str
    messages: list[Message] | None = None
    text: str | None = None
    source: str = ""  # "file:line" (or "dataset:index"), for messages that name the row
    meta: dict[str, Any] | None = None  # original row fields kept for export (optional)
    followups: list[Message] | None = None  # later user turns, each answered in turn (regenerate: all)
    thinking: bool | None = None  # the thinking mode to send (the job's, or the row's column); None: nothing
    primary_id: str | None = None  # samples > 1: the input row's own id (``id`` is ``{primary_id}_gen{sample}``)
    sample: int | None = None  # samples > 1: which of the row's answers this is (0..samples-1)
    seed: int | None = None  # samples > 1: the seed sent with this prompt's requests (sources.samples)
    id_value: int | None = None  # the row's id when the input gave an integer (``id``, or with samples
    # ``primary_id``, is its decimal string)

    @property
    def json_id(self) -> str | int:
        """The id as the record writes it: the input's integer when it gave one (a sample's id is a string)."""
        return self.id if self.id_value is None or self.primary_id is not None else self.id_value

    @property
    def json_primary_id(self) -> str | int | None:
        """``primary_id`` as the record writes it (the input's integer when it gave one)."""
        return self.primary_id if self.id_value is None or self.primary_id is None else self.id_value

    def payload(self) -> list[Message] | str:
        """The prompt as sent: messages for chat, text otherwise."""
        if self.messages is not None:
            return self.messages
        return self.text or ""


@dataclass(slots=True)
class Generation:
    """What a backend returns for one successful request (before the dispatcher adds bookkeeping)."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_content: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    thinking: bool | None = None  # the thinking mode as sent (None: nothing was sent)


class TurnLike(Protocol):
    """What an entry of ``turns`` is written from: a :class:`Turn`, or a turn read back (``records.read.Answer``)."""

    @property
    def completion(self) -> str | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def server(self) -> str | None: ...
    @property
    def latency_s(self) -> float | None: ...
    @property
    def reasoning_content(self) -> str | None: ...
    @property
    def prompt_token_ids(self) -> list[int] | None: ...
    @property
    def completion_token_ids(self) -> list[int] | None: ...
    @property
    def quality(self) -> dict[str, Any] | None: ...


def turn_json(t: TurnLike) -> dict[str, Any]:
    """One entry of ``turns`` as JSON: reasoning, token ids and quality only when there are any."""
    turn: dict[str, Any] = {
        "completion": t.completion,
        "finish_reason": t.finish_reason,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "server": t.server,
        "latency_s": t.latency_s,
    }
    if t.reasoning_content is not None:
        turn["reasoning_content"] = t.reasoning_content
    if t.completion_token_ids is not None:
        turn["prompt_token_ids"] = t.prompt_token_ids
        turn["completion_token_ids"] = t.completion_token_ids
    if t.quality is not None:
        turn["quality"] = t.quality
    return turn


@dataclass(frozen=True, slots=True)
class Turn:
    """One answered user turn of a multi-turn regeneration (``regenerate: all``), as kept in ``Completion.turns``."""

    completion: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    server: str
    latency_s: float
    reasoning_content: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    quality: dict[str, Any] | None = None  # this turn's quality signals (tokenmill.quality.signals)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: reasoning and token ids only when there are any."""
        return turn_json(self)


@dataclass(slots=True)
class Completion:
    """A completed prompt, as written to a shard (``finish_reason`` is ``"length"`` when any turn was cut)."""

    id: str | int
    prompt: list[Message] | str
    completion: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    sampling: dict[str, Any]
    server: str
    latency_s: float
    attempts: int
    started_at: float
    finished_at: float
    reasoning_content: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    turns: list[dict[str, Any]] | None = None  # regenerate: all — one entry per user turn, in order
    quality: dict[str, Any] | None = None  # flags, repetition score, answer hash (tokenmill.quality.signals)
    thinking: bool | None = None  # enable_thinking as sent with the request; null: nothing sent
    primary_id: str | int | None = None  # samples > 1: the input row's id; null for a job of one answer per prompt
    sample: int | None = None  # samples > 1: k of ``{primary_id}_gen{k}``
    origin: dict[str, Any] | None = None  # served model, engine, version, flags hash (tokenmill.monitor.origin)
    fields: dict[str, Any] | None = None  # the input row's own columns (input.keep_fields)
    status: str = "ok"

    @property
    def key(self) -> str:
        """The canonical id the done set keys on (an integer id as its decimal string)."""
        return self.id if isinstance(self.id, str) else str(self.id)


@dataclass(slots=True)
class Failure:
    """A prompt that could not be completed, with the reason (written to ``failed.jsonl``)."""

    id: str | int
    prompt: list[Message] | str
    error_type: str
    error: str
    http_status: int | None
    server: str | None
    attempts: int
    finished_at: float
    status: str = "failed"

    @property
    def key(self) -> str:
        """The canonical id the done set keys on (an integer id as its decimal string)."""
        return self.id if isinstance(self.id, str) else str(self.id)


@dataclass(slots=True)
class Skip:
    """An input row that was skipped under ``on_bad_row: skip`` (written to ``skipped.jsonl``)."""

    source: str
    reason: str
    id: str | None = None
    status: str = "skipped"


_SCALES = (1.0, 10.0, 100.0, 1000.0, 10000.0)


def rounded(x: float, digits: int) -> float:
    """``x`` to ``digits`` decimals (0 to 4; a tie rounds up): what a record writes of a time or a latency. A
    third of ``round(x, digits)``'s cost (which formats the number in decimal), and it runs for every record."""
    scale = _SCALES[digits]
    return math.floor(x * scale + 0.5) / scale


def encode(record: Completion | Failure | Skip) -> bytes:
    """One JSONL line (with the trailing newline)."""
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def decode(line: bytes) -> dict[str, Any]:
    """Decode one line; raises ``orjson.JSONDecodeError`` (a ``ValueError``) on a torn or bad line."""
    obj = orjson.loads(line)
    if not isinstance(obj, dict) or "status" not in obj:
        raise ValueError("not a tokenmill record")
    return obj


@dataclass(slots=True)
class RequestOutcome:
    """One finished attempt, handed to the optional observer (latency histograms, finish reasons); one per
    request, so not frozen (a frozen dataclass's ``__init__`` costs twice as much)."""

    server: str
    latency_s: float
    ok: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # the error's type name for a failed attempt (retried or not)
