"""A prompt on its way through the dispatch loop, the records it ends as, where they go, and the loop's counters.

With ``regenerate: all`` a conversation is sent one user turn at a time: each answer is added to the history and
the next user turn is sent (to the same server, whose prefix cache holds the history); the record is written
once every turn is answered, with each turn's completion, finish reason and token counts in ``turns``. The
record's own ``finish_reason`` is ``length`` when any turn was cut at max_tokens, else the last turn's. Its
``id`` keeps the input's JSON type (an integer stays an integer).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from tokenmill.errors import RequestError
from tokenmill.monitor.origin import Origin
from tokenmill.quality.signals import Signals, combined, signals
from tokenmill.records import Completion, Failure, Generation, Prompt, Turn, rounded


@dataclass(slots=True)
class Work:
    """A prompt on its way through the loop."""

    prompt: Prompt
    attempts: int = 0
    strikes: int = 0  # failures that count against max_attempts (per turn)
    last_server: str | None = None
    first_wall: float | None = None
    sending: Prompt | None = None  # a later turn's conversation (regenerate: all); None: the prompt itself
    turns: list[Turn] | None = None  # answered turns so far (regenerate: all)
    affinity: str | None = None  # the server holding this conversation's prefix in its cache
    abandoned: int = 0  # attempts given up on a read timeout while the server was busy (queue or work)

    @property
    def current(self) -> Prompt:
        return self.sending if self.sending is not None else self.prompt

    def answered(self, gen: Generation, server: str, latency_s: float) -> bool:
        """Take one answer. True when it was the last turn; otherwise the next turn is set up to be sent."""
        followups = self.prompt.followups
        if not followups:
            return True
        turns = self.turns if self.turns is not None else []
        self.turns = turns
        turns.append(_turn(gen, server, latency_s))
        if len(turns) > len(followups):
            return True
        history = self.current.messages or []  # the next user turn, with the answers so far as history
        conversation = [*history, {"role": "assistant", "content": gen.text}, followups[len(turns) - 1]]
        self.sending = Prompt(
            id=self.prompt.id, messages=conversation, source=self.prompt.source, seed=self.prompt.seed
        )
        self.sending.thinking = self.prompt.thinking  # every turn is sent in the row's mode
        self.affinity, self.strikes = server, 0
        return False


def _turn(gen: Generation, server: str, latency_s: float) -> Turn:
    return Turn(
        completion=gen.text,
        finish_reason=gen.finish_reason,
        prompt_tokens=gen.prompt_tokens,
        completion_tokens=gen.completion_tokens,
        server=server,
        latency_s=rounded(latency_s, 4),
        reasoning_content=gen.reasoning_content,
        prompt_token_ids=gen.prompt_token_ids if gen.completion_token_ids is not None else None,
        completion_token_ids=gen.completion_token_ids,
        quality=_signals(gen).as_dict(),
    )


def _signals(gen: Generation) -> Signals:
    return signals(gen.text, gen.finish_reason, gen.reasoning_content)


@dataclass(frozen=True, slots=True)
class RecordMaker:
    """Builds the records a prompt ends as: the job's model and sampling are stamped on every completion."""

    model: str
    sampling: dict[str, object]
    wall: Callable[[], float]
    origin: Callable[[str], Origin | None] = lambda _server: None  # what the server says it is

    def completion(self, work: Work, gen: Generation, server: str, latency_s: float) -> Completion:
        prompt = work.prompt
        turns = work.turns
        prompt_tokens, completion_tokens = gen.prompt_tokens, gen.completion_tokens
        finish_reason = gen.finish_reason
        if turns:
            quality = combined([t.quality for t in turns if t.quality is not None])
            prompt_tokens = sum(t.prompt_tokens or 0 for t in turns)
            completion_tokens = sum(t.completion_tokens or 0 for t in turns)
            if any(t.finish_reason == "length" for t in turns):
                finish_reason = "length"  # a turn cut at max_tokens cuts the conversation (each turn keeps its own)
        else:
            quality = _signals(gen).as_dict()
        sent: list[dict[str, Any]] | str = (
            [*prompt.messages, *prompt.followups] if prompt.followups and prompt.messages else prompt.payload()
        )
        now = self.wall()  # one clock read per record: a request always has first_wall (set by its first attempt)
        origin = self.origin(server)
        meta = prompt.meta
        return Completion(
            id=prompt.json_id,
            prompt=sent,
            completion=gen.text,
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model=self.model,
            sampling=self.sampling if prompt.seed is None else {**self.sampling, "seed": prompt.seed},
            server=server,
            latency_s=rounded(latency_s, 4),
            attempts=work.attempts,
            started_at=rounded(work.first_wall or now, 3),
            finished_at=rounded(now, 3),
            reasoning_content=gen.reasoning_content,
            prompt_token_ids=gen.prompt_token_ids,
            completion_token_ids=gen.completion_token_ids,
            turns=[t.as_dict() for t in turns] if turns else None,
            quality=quality,
            thinking=gen.thinking,
            primary_id=prompt.json_primary_id,
            sample=prompt.sample,
            origin=origin.as_dict() if origin is not None else None,
            fields=(meta.get("fields") or None) if meta else None,
        )

    def failure(self, work: Work, exc: RequestError, server: str) -> Failure:
        return Failure(
            id=work.prompt.json_id,
            prompt=work.prompt.payload(),
            error_type=type(exc).__name__,
            error=exc.message,
            http_status=exc.status,
            server=server,
            attempts=work.attempts,
            finished_at=rounded(self.wall(), 3),
        )


class Sink(Protocol):
    """Where results go (the output directory)."""

    def write(self, rec: Completion) -> None: ...

    def fail(self, rec: Failure) -> None: ...


@dataclass(slots=True)
class DispatchStats:
    """Client-side counters (monotonic)."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    waiting_since: float | None = None  # set while no server is usable
    abandoned: int = 0  # requests given up on a read timeout while their server was overloaded
    abandoned_tokens: float = 0.0  # their estimated output tokens (decoded by the servers, thrown away)
    held: str | None = None  # why no new prompt is taken now (None: not held)
    outlived: int = 0  # of ``abandoned``, requests that timed out while their server ran them (no queue)
    repeatedly_abandoned: int = 0  # prompts abandoned retry.abandoned_report_after times or more
    repeated_ids: deque[str] = field(default_factory=lambda: deque(maxlen=20))  # the latest of them
    recent_failures: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    counts: dict[str, float] = field(default_factory=dict)  # run counters without a field of their own

    def count(self, stat: str, n: float = 1) -> None:
        """Add ``n`` to run counter ``stat``, a row of the metric table (:mod:`tokenmill.run.metrics`) whose
        ``stat`` names no field here: a new counter is that row and this call where it happens."""
        self.counts[stat] = self.counts.get(stat, 0) + n

    def value(self, stat: str) -> float:
        """Run counter ``stat``: its field's value, else its count (0 before the first)."""
        value: float = getattr(self, stat) if stat in _STAT_FIELDS else self.counts.get(stat, 0)
        return value


_STAT_FIELDS = frozenset(f.name for f in fields(DispatchStats) if f.name != "counts")
