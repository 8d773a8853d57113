"""What the client itself sees, request by request: latencies per server, output lengths, finish reasons.

Every answer counts (each turn of a conversation is one): :attr:`ClientMetrics.truncated` of them hit max_tokens
(finish reason ``length``), and ``completed_len`` holds the lengths of the others, whole answers, for the doctor's
evidence and its suggested max_tokens.

:meth:`ClientMetrics.observe` is the dispatcher's observer hook, so it runs on the hot path: it does a few
integer additions and one bisect, never I/O, and its memory is fixed (histograms, not lists).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tokenmill.histogram import Histogram

if TYPE_CHECKING:
    from tokenmill.records import RequestOutcome

LATENCY_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 240, 480, 900, 1800, 3600)
TRUNCATED = "length"  # the finish reason of an answer cut at max_tokens (OpenAI's, SGLang's and vLLM's)
OUTPUT_LEN_BUCKETS = (
    8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
    3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
)  # fmt: skip


class ClientMetrics:
    """Per-request observations, fed by the dispatcher's observer hook."""

    def __init__(self, servers: Iterable[str]) -> None:
        self.latency: dict[str, Histogram] = {url: Histogram(LATENCY_BUCKETS_S) for url in servers}
        self.output_len = Histogram(OUTPUT_LEN_BUCKETS)
        self.completed_len = Histogram(OUTPUT_LEN_BUCKETS)  # answers that did not hit max_tokens
        self.finish_reasons: dict[str, int] = {}
        self.errors: dict[str, int] = {}  # failed attempts by error type (retried or not)
        self.prompt_tokens = 0
        self.prompt_count = 0

    def observe(self, outcome: RequestOutcome) -> None:
        """Record one finished attempt (cheap; called on the hot path)."""
        hist = self.latency.get(outcome.server)
        if hist is None:
            hist = self.latency[outcome.server] = Histogram(LATENCY_BUCKETS_S)
        hist.observe(outcome.latency_s)
        if not outcome.ok:
            kind = outcome.error or "error"
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        if outcome.completion_tokens is not None:
            self.output_len.observe(outcome.completion_tokens)
        if outcome.prompt_tokens is not None:
            self.prompt_tokens += outcome.prompt_tokens
            self.prompt_count += 1
        reason = outcome.finish_reason or "unknown"
        self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + 1
        if reason != TRUNCATED and outcome.completion_tokens is not None:
            self.completed_len.observe(outcome.completion_tokens)

    @property
    def answers(self) -> int:
        """Answers received (every turn of a conversation counts)."""
        return sum(self.finish_reasons.values())

    @property
    def truncated(self) -> int:
        """Answers that hit max_tokens."""
        return self.finish_reasons.get(TRUNCATED, 0)

    @property
    def avg_prompt_tokens(self) -> float | None:
        return self.prompt_tokens / self.prompt_count if self.prompt_count else None

    @property
    def avg_output_tokens(self) -> float | None:
        return self.output_len.mean()
