"""The async dispatch loop: per-server in-flight limits, retries, quarantine, stop.

One row's path: the loop takes a prompt (a ready retry first, else the next from the source), waits until
some usable server has a free slot (the pool picks it: :mod:`tokenmill.run.servers`), and starts one request
task. The task records a Completion or a Failure in the sink (built by :mod:`tokenmill.run.work`), or, on a
transient error, schedules a retry after an exponential backoff with jitter (:mod:`tokenmill.run.retries`: what a
failed attempt does to its prompt and its server). A server that fails
``quarantine_after`` times in a row is set aside and probed every ``probe_interval_s`` until it answers again;
while no server is usable the loop waits and says so, so prompts are never burned as failures. Whether a
failure spends one of the prompt's attempts is a property of its type (:mod:`tokenmill.errors`): the servers'
state (refused or dropped connections, 429, 503) does not. Nor does a read timeout on a server that is busy
(:meth:`ServerPool.overloaded`): in its queue, that server's in-flight cap is cut to what it runs; while it ran
the request (nothing queued), its read timeout grows towards ``retry.read_timeout_max_s`` (at the ceiling, fewer
run at once, and those timeouts do spend attempts: an answer that outlives the ceiling is failed, never retried
without end). The server is not set aside, and the request's output tokens are counted as abandoned (estimated:
its time x the per-request rate of that server's completions, at most ``max_tokens``). A prompt abandoned
``retry.abandoned_report_after`` times is named in the log.

:meth:`Dispatcher.hold` (the runner's housekeeping) pauses taking new prompts and says why (uploads too far
behind); meanwhile retries, requests in flight and the one prompt already waiting for a slot go on, and the
loop waits until it is released.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp

from tokenmill.backends.base import Backend
from tokenmill.backends.http import open_session, probe_health
from tokenmill.config import RetrySpec
from tokenmill.errors import (
    MisconfiguredError,
    PermanentError,
    RequestTimeout,
    ServerError,
    TokenmillError,
    TransientError,
)
from tokenmill.records import Generation, Prompt, RequestOutcome
from tokenmill.run.collector import collect_less
from tokenmill.run.retries import Retries
from tokenmill.run.servers import ReadTimeouts, ServerPool, ServerState
from tokenmill.run.work import DispatchStats, RecordMaker, Sink, Work

log = logging.getLogger(__name__)

NO_SERVER_LOG_EVERY_S = 60.0

Probe = Callable[[aiohttp.ClientSession, str], Awaitable[bool]]


class Dispatcher:
    """Sends every prompt of a source to the pool's servers and records each result exactly once in the sink."""

    def __init__(
        self,
        pool: ServerPool,
        backend: Backend,
        sink: Sink,
        retry: RetrySpec,
        records: RecordMaker,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        probe: Probe = probe_health,
        observer: Callable[[RequestOutcome], None] | None = None,
    ) -> None:
        if not pool.servers:
            raise ServerError("no servers to send work to")
        self.pool = pool
        self.backend = backend
        self.sink = sink
        self.retry = retry
        self.records = records
        self.clock = clock
        self.rng = rng or random.Random()
        self.probe = probe
        self.observer = observer  # sees every finished attempt; never changes what the loop does
        self.stats = DispatchStats()
        self._wake = asyncio.Event()
        self.retries = Retries(pool, sink, retry, records, self.stats, wake=self._wake, clock=clock, rng=self.rng)
        self._ready = self.retries.ready  # the same deque: the loop takes from it, a conversation's next turn first
        self._inflight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        pool.on_change = self._wake.set
        if pool.timeouts is None:
            pool.timeouts = ReadTimeouts(retry.read_timeout_s, max(retry.read_timeout_s, retry.read_timeout_max_s))
        self._stopping = False
        self._fatal: BaseException | None = None
        self._session: aiohttp.ClientSession | None = None
        self._last_wait_log = -1e18

    # ---- public -------------------------------------------------------------------------------------------

    @property
    def servers(self) -> list[ServerState]:
        return self.pool.servers

    @property
    def adaptive(self) -> bool:
        return self.pool.adaptive

    @property
    def inflight(self) -> int:
        return self._inflight

    def abort(self, exc: BaseException) -> None:
        """Stop because of ``exc`` (raised from :meth:`run` once in-flight requests are settled)."""
        if self._fatal is None:
            self._fatal = exc
        self.request_stop()

    def hold(self, why: str | None) -> None:
        """Take no new prompt while ``why`` is set (retries and requests in flight go on); None: go on."""
        if why == self.stats.held:
            return
        if why:
            log.warning("generation paused: %s (requests in flight finish)", why)
        else:
            log.warning("generation resumes (it was paused: %s)", self.stats.held)
        self.stats.held = why
        self._wake.set()

    def request_stop(self) -> None:
        """Stop taking new prompts; in-flight requests may finish (their results are kept)."""
        self._stopping = True
        self._wake.set()

    async def run(self, source: AsyncIterator[Prompt]) -> bool:
        """Dispatch until the source is exhausted and every prompt is recorded (True) or a stop (False)."""
        limit = 0 if self.pool.adaptive else (self.pool.first_limit + 4) * len(self.servers)
        with collect_less(self.pool.first_limit * len(self.servers)):  # the in-flight bound, adaptive or not
            async with open_session(self.retry, limit) as session:
                self._session = session
                prober = asyncio.create_task(self._probe_loop(), name="tokenmill-prober")
                try:
                    finished = await self._main(source)
                    await self._drain(self.retry.stop_grace_s if not finished else None)
                finally:
                    prober.cancel()
                    for task in list(self._tasks):
                        task.cancel()
                    await asyncio.gather(prober, *self._tasks, return_exceptions=True)
        if self._fatal is not None:
            raise self._fatal
        return finished and not self._stopping

    # ---- the loop -----------------------------------------------------------------------------------------

    async def _main(self, source: AsyncIterator[Prompt]) -> bool:
        source_done = False
        while not self._stopping:
            if self._ready:
                work = self._ready.popleft()
            elif source_done:
                if self._inflight == 0 and self.retries.delayed == 0:
                    return True
                await self._wait()
                continue
            elif self.stats.held is not None:
                await self._wait()
                continue
            else:
                try:
                    prompt = await anext(source)
                except StopAsyncIteration:
                    source_done = True
                    continue
                work = Work(prompt)
            server = await self._acquire(work)
            if server is None:
                self._ready.appendleft(work)
                break
            self._start(work, server)
        return False

    async def _wait(self) -> None:
        self._wake.clear()
        await self._wake.wait()

    async def _acquire(self, work: Work) -> ServerState | None:
        while not self._stopping:
            server = self.pool.pick(affinity=work.affinity, avoid=work.last_server)
            if server is not None:
                self.stats.waiting_since = None
                return server
            if not self.pool.any_usable():
                self._note_no_server()
                if self._stopping:
                    break
            await self._wait()
        return None

    def _note_no_server(self) -> None:
        if self.pool.all_misconfigured():
            self._fatal = ServerError(
                f"every server refuses this job's requests ({self.pool.problems()}). Check the servers' URLs, the "
                "model name and the API key variable (api_key_env), then rerun the same command to resume."
            )
            self._stopping = True
            return
        now = self.clock()
        if self.stats.waiting_since is None:
            self.stats.waiting_since = now
        if now - self._last_wait_log >= NO_SERVER_LOG_EVERY_S:
            self._last_wait_log = now
            log.warning(
                "no server is usable (%s); waiting and probing every %.0fs — nothing is being marked failed",
                self.pool.problems(),
                self.retry.probe_interval_s,
            )

    def _start(self, work: Work, server: ServerState) -> None:
        server.inflight += 1
        self._inflight += 1
        self.stats.started += 1
        task = asyncio.create_task(self._attempt(work, server))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self, grace_s: float | None) -> None:
        if not self._tasks:
            return
        if grace_s is None:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            return
        log.info("stopping: waiting up to %.0fs for %d requests in flight", grace_s, len(self._tasks))
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            log.info("%d unfinished requests will be redone on resume", len(pending))

    # ---- one request --------------------------------------------------------------------------------------

    async def _attempt(self, work: Work, server: ServerState) -> None:
        work.attempts += 1
        if work.first_wall is None:
            work.first_wall = self.records.wall()
        start = self.clock()
        try:
            await self._attempt_once(work, server, start)
        except TokenmillError as exc:  # the output failed (disk full, ...) or a request could not be built
            self.abort(exc)
        except Exception as exc:  # a bug must not lose the prompt: stop, keep everything recorded so far
            log.exception("unexpected error for prompt %s", work.prompt.id)
            self.abort(exc)
        finally:
            server.inflight -= 1
            self._inflight -= 1
            self._wake.set()

    async def _attempt_once(self, work: Work, server: ServerState, start: float) -> None:
        assert self._session is not None
        timeout = server.read_timeout_s
        try:
            gen = await self.backend.generate(self._session, server.url, work.current, read_timeout_s=timeout)
        except MisconfiguredError as exc:
            self.pool.set_aside(server, exc.message, self.clock(), misconfigured=True)
            work.attempts -= 1
            self.retries.requeue(work, 0.0)
        except PermanentError as exc:
            self._observe(server, self.clock() - start, None, exc)
            server.consecutive_failures = 0
            server.failed += 1
            self.retries.fail(work, exc, server)
        except RequestTimeout as exc:
            now = self.clock()
            self._observe(server, now - start, None, exc)
            kind = self.pool.overloaded(server, start, now)
            if kind is None:
                self.retries.on_transient(work, server, exc)
            else:
                self.retries.on_overload(work, server, exc, now - start, kind == "work", timeout)
        except TransientError as exc:
            self._observe(server, self.clock() - start, None, exc)
            self.retries.on_transient(work, server, exc)
        else:
            now = self.clock()  # one clock read for the latency, the observer and the server's last completion
            self._observe(server, now - start, gen, None)
            self._on_success(work, server, gen, now - start, now)

    def _observe(self, server: ServerState, latency_s: float, gen: Generation | None, exc: Exception | None) -> None:
        if self.observer is None:
            return
        outcome = RequestOutcome(
            server=server.url,
            latency_s=latency_s,
            ok=gen is not None,
            prompt_tokens=gen.prompt_tokens if gen else None,
            completion_tokens=gen.completion_tokens if gen else None,
            finish_reason=gen.finish_reason if gen else None,
            error=type(exc).__name__ if exc is not None else None,
        )
        try:
            self.observer(outcome)
        except Exception:  # an observer's bug is reported once and the observer dropped; dispatch goes on
            log.exception("request observer failed; it is switched off for the rest of the run")
            self.observer = None

    def _on_success(self, work: Work, server: ServerState, gen: Generation, latency: float, now: float) -> None:
        server.consecutive_failures = 0
        server.completed += 1
        server.last_completed_at = now
        server.latency_s += latency
        server.prompt_tokens += gen.prompt_tokens or 0
        server.completion_tokens += gen.completion_tokens or 0
        self.stats.prompt_tokens += gen.prompt_tokens or 0
        self.stats.completion_tokens += gen.completion_tokens or 0
        if not work.answered(gen, server.url, latency):
            self._ready.appendleft(work)  # the conversation's next turn, first in line
            return
        self.stats.completed += 1
        self.sink.write(self.records.completion(work, gen, server.url, latency))

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retry.probe_interval_s)
            for server in self.pool.to_probe():
                assert self._session is not None
                if await self.probe(self._session, server.url):
                    self.pool.answered(server)
