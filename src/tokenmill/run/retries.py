"""What becomes of a prompt after a failed attempt: sent again after a backoff, or recorded as a failure.

It is sent again after an exponential backoff with jitter, or recorded as a failure once its attempts are spent; the
attempt also counts against its server.

A server that fails ``quarantine_after`` times in a row is set aside (the pool probes it until it answers again).
Whether a failure spends one of the prompt's attempts is a property of its type (:mod:`tokenmill.errors`): the
servers' state (refused or dropped connections, 429, 503) does not; a prompt whose failures are all the servers' fault
is still failed after ``HARD_ATTEMPT_FACTOR`` times ``max_attempts``. A read timeout on a busy server does not spend
one either: the request's output tokens are counted as abandoned and it is sent again (:mod:`tokenmill.run.abandon`:
the one case such a prompt is failed).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable

from tokenmill.config import RetrySpec
from tokenmill.errors import PermanentError, RequestTimeout, TransientError
from tokenmill.run.abandon import note_abandoned, past_ceiling, wasted_tokens
from tokenmill.run.servers import ServerPool, ServerState
from tokenmill.run.work import DispatchStats, RecordMaker, Sink, Work

# A prompt whose failures are all the servers' fault is still failed after this many times max_attempts.
HARD_ATTEMPT_FACTOR = 10


class Retries:
    """The prompts to send again (``ready``: now; ``delayed``: how many are still in their backoff) and the
    bookkeeping of every failed attempt (the server's counters and quarantine, the prompt's strikes, the failure
    recorded in the sink); ``wake`` is set whenever a prompt becomes ready."""

    def __init__(
        self,
        pool: ServerPool,
        sink: Sink,
        retry: RetrySpec,
        records: RecordMaker,
        stats: DispatchStats,
        *,
        wake: asyncio.Event,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.sink = sink
        self.retry = retry
        self.records = records
        self.stats = stats
        self.wake = wake
        self.clock = clock
        self.rng = rng
        self.ready: deque[Work] = deque()
        self.delayed = 0
        max_tokens = records.sampling.get("max_tokens")
        self._max_tokens = max_tokens if isinstance(max_tokens, int) else None

    def on_transient(self, work: Work, server: ServerState, exc: TransientError) -> None:
        server.errors += 1
        if exc.status in (429, 503):
            server.throttled += 1
        server.consecutive_failures += 1
        self.stats.retries += 1
        self.stats.recent_failures.append(f"{server.url}: {exc.message}")
        if server.consecutive_failures >= self.retry.quarantine_after and server.usable:
            why = f"{server.consecutive_failures} failures in a row, last: {exc.message}"
            self.pool.set_aside(server, why, self.clock())
        if exc.counts_against_prompt:
            work.strikes += 1
        work.last_server = server.url
        if work.strikes >= self.retry.max_attempts or work.attempts >= HARD_ATTEMPT_FACTOR * self.retry.max_attempts:
            self.fail(work, exc, server)
            return
        self.requeue(work, self.retry.backoff_s(work.attempts) * self.rng.uniform(0.5, 1.5))

    def on_overload(
        self, work: Work, server: ServerState, exc: RequestTimeout, spent_s: float, ran: bool, timeout: float | None
    ) -> None:
        """A read timeout on a busy server: its tokens counted as abandoned, retried without spending an attempt,
        unless it ran with the read timeout at its ceiling (``ran``: nothing was queued; :mod:`.abandon`)."""
        tokens = wasted_tokens(spent_s, server.request_rate() or self._fleet_request_rate(), self._max_tokens)
        server.abandoned_tokens += tokens
        server.errors += 1
        self.stats.abandoned += 1
        self.stats.abandoned_tokens += tokens
        self.stats.retries += 1
        self.stats.outlived += ran
        what = "ran longer than the read timeout" if ran else "queue wait; overloaded, backing off"
        self.stats.recent_failures.append(f"{server.url}: {exc.message} ({what})")
        work.last_server = server.url
        note_abandoned(work, self.stats, self.retry)
        ceiling = self.pool.timeouts.max_s if self.pool.timeouts is not None else self.retry.read_timeout_s
        failed = past_ceiling(work, server.url, ran, timeout or self.retry.read_timeout_s, ceiling, self.retry)
        if failed is not None or work.attempts >= HARD_ATTEMPT_FACTOR * self.retry.max_attempts:
            self.fail(work, failed or exc, server)
            return
        self.requeue(work, self.retry.backoff_s(1) * self.rng.uniform(0.5, 1.5))

    def _fleet_request_rate(self) -> float | None:
        tokens = sum(s.completion_tokens for s in self.pool.servers)
        latency = sum(s.latency_s for s in self.pool.servers)
        return tokens / latency if latency > 0 and tokens else None

    def requeue(self, work: Work, delay: float) -> None:
        if delay <= 0:
            self.ready.append(work)
            return
        self.delayed += 1
        asyncio.get_running_loop().call_later(delay, self._ready_again, work)

    def _ready_again(self, work: Work) -> None:
        self.delayed -= 1
        self.ready.append(work)
        self.wake.set()

    def fail(self, work: Work, exc: TransientError | PermanentError, server: ServerState) -> None:
        self.stats.failed += 1
        self.sink.fail(self.records.failure(work, exc, server.url))
