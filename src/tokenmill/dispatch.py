"""The async dispatch loop: per-server in-flight limits, least-loaded choice, retries, quarantine, stop.

One row's path: the loop takes a prompt (a ready retry first, else the next from the source), waits until
some usable server has a free slot, picks the one with the most free capacity (avoiding the server that just
failed it), and starts one request task. The task records a Completion or a Failure in the sink, or, on a
transient error, schedules a retry after an exponential backoff with jitter. A server that fails
``quarantine_after`` times in a row is set aside and probed every ``probe_interval_s`` until it answers again;
while no server is usable the loop waits and says so, so prompts are never burned as failures. Failures that
are the server's state (refused or dropped connections, 429, 503) do not use up a prompt's attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from tokenmill.backends.base import Backend
from tokenmill.config import RetrySpec
from tokenmill.errors import (
    MisconfiguredError,
    PermanentError,
    RequestError,
    ServerError,
    TokenmillError,
    TransientError,
)
from tokenmill.records import Completion, Failure, Generation, Prompt, RequestOutcome

log = logging.getLogger("tokenmill.dispatch")

# A prompt whose failures are all the servers' fault is still failed after this many times max_attempts.
HARD_ATTEMPT_FACTOR = 10
# Garbage-collector thresholds while dispatching: every request allocates a few hundred short-lived objects,
# and with the default (700) the collector runs every few requests and rescans all long-lived objects often.
RUN_GC_THRESHOLDS = (20_000, 20, 20)


class Sink(Protocol):
    """Where results go (the output directory)."""

    def write(self, rec: Completion) -> None: ...

    def fail(self, rec: Failure) -> None: ...


@dataclass(slots=True)
class ServerState:
    """One server as the dispatcher sees it; read by progress displays and the concurrency controller."""

    url: str
    limit: int
    inflight: int = 0
    usable: bool = True
    problem: str | None = None  # why it is set aside
    misconfigured: bool = False
    consecutive_failures: int = 0
    completed: int = 0
    failed: int = 0
    errors: int = 0
    throttled: int = 0  # 429/503 answers (the concurrency controller backs off on these)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    set_aside_at: float | None = None
    draining: bool = False  # the fleet is about to restart it (or it is down): no new requests
    limit_reason: str | None = None  # why ``limit`` is what it is (set by the concurrency controller)


@dataclass(slots=True)
class Work:
    """A prompt on its way through the loop."""

    prompt: Prompt
    attempts: int = 0
    strikes: int = 0  # failures that count against max_attempts (per turn)
    last_server: str | None = None
    first_wall: float | None = None
    sending: Prompt | None = None  # a later turn's conversation (regenerate: all); None: the prompt itself
    turns: list[dict[str, Any]] | None = None  # answered turns so far (regenerate: all)
    affinity: str | None = None  # the server holding this conversation's prefix in its cache

    @property
    def current(self) -> Prompt:
        return self.sending if self.sending is not None else self.prompt


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
    recent_failures: deque[str] = field(default_factory=lambda: deque(maxlen=5))


class Dispatcher:
    """Sends every prompt of a source to the fleet and records each result exactly once in the sink."""

    def __init__(
        self,
        servers: list[str],
        backend: Backend,
        sink: Sink,
        retry: RetrySpec,
        concurrency: int,
        *,
        model: str,
        sampling: dict[str, object],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        probe: Callable[[aiohttp.ClientSession, str], Awaitable[bool]] | None = None,
        observer: Callable[[RequestOutcome], None] | None = None,
        adaptive: bool = False,
    ) -> None:
        if not servers:
            raise ServerError("no servers to send work to")
        self.servers = [ServerState(url=u, limit=concurrency) for u in servers]
        self._first_limit = concurrency
        self.backend = backend
        self.sink = sink
        self.retry = retry
        self.model = model
        self.sampling = sampling
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.probe = probe or probe_health
        self.adaptive = adaptive  # targets are set by the concurrency controller while running
        self.observer = observer  # sees every finished attempt; never changes what the loop does
        self.stats = DispatchStats()
        self._ready: deque[Work] = deque()
        self._delayed = 0
        self._inflight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._fatal: BaseException | None = None
        self._session: aiohttp.ClientSession | None = None
        self._last_wait_log = -1e18

    # ---- public -------------------------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return self._inflight

    def server_urls(self) -> dict[str, bool]:
        """Each server's URL and whether it is drained (what the fleet's endpoints file is compared with)."""
        return {s.url: s.draining for s in self.servers}

    def set_draining(self, url: str, draining: bool) -> None:
        """Send ``url`` no new requests (those in flight finish), or use it again: the fleet's hook for
        restarts and re-flags. A server taken back counts as healthy (the fleet waited for its health)."""
        for s in self.servers:
            if s.url == url:
                s.draining = draining
                if not draining and not s.misconfigured:
                    s.usable, s.problem, s.consecutive_failures = True, None, 0
        self._wake.set()

    def add_server(self, url: str) -> None:
        """Start sending work to one more server (the fleet added or moved one)."""
        if url not in self.server_urls():
            self.servers.append(ServerState(url=url, limit=self._first_limit))
            self._wake.set()

    def abort(self, exc: BaseException) -> None:
        """Stop because of ``exc`` (raised from :meth:`run` once in-flight requests are settled)."""
        if self._fatal is None:
            self._fatal = exc
        self.request_stop()

    def request_stop(self) -> None:
        """Stop taking new prompts; in-flight requests may finish (their results are kept)."""
        self._stopping = True
        self._wake.set()

    async def run(self, source: AsyncIterator[Prompt], grace_s: float = 10.0) -> bool:
        """Dispatch until the source is exhausted and every prompt is recorded (True) or a stop (False)."""
        # The dispatcher bounds in-flight requests per server itself; the pool must never cap below that
        # (aiohttp's default of 100 would), so it is unbounded when targets may grow.
        total_limit = 0 if self.adaptive else sum(s.limit for s in self.servers) + 4 * len(self.servers)
        connector = aiohttp.TCPConnector(limit=total_limit, limit_per_host=0)
        # total bounds the whole request: a body trickling in a byte at a time never trips a per-read timeout
        timeout = aiohttp.ClientTimeout(
            total=self.retry.connect_timeout_s + self.retry.read_timeout_s,
            sock_connect=self.retry.connect_timeout_s,
            sock_read=self.retry.read_timeout_s,
        )
        with _gc_for_run():
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                self._session = session
                prober = asyncio.create_task(self._probe_loop(), name="tokenmill-prober")
                try:
                    finished = await self._main(source)
                    await self._drain(grace_s if not finished else None)
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
                if self._inflight == 0 and self._delayed == 0:
                    return True
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

    def _pick(self, work: Work) -> ServerState | None:
        best: ServerState | None = None
        best_key: tuple[bool, bool, int, int] | None = None
        for s in self.servers:
            if not s.usable or s.draining or s.inflight >= s.limit:
                continue
            key = (s.url == work.affinity, s.url != work.last_server, s.limit - s.inflight, -s.errors)
            if best_key is None or key > best_key:
                best, best_key = s, key
        return best

    async def _acquire(self, work: Work) -> ServerState | None:
        while not self._stopping:
            server = self._pick(work)
            if server is not None:
                self.stats.waiting_since = None
                return server
            if not any(s.usable and not s.draining for s in self.servers):
                self._note_no_server()
                if self._stopping:
                    break
            await self._wait()
        return None

    def _note_no_server(self) -> None:
        if all(s.misconfigured for s in self.servers):
            problems = "; ".join(f"{s.url}: {s.problem}" for s in self.servers)
            self._fatal = ServerError(
                f"every server refuses this job's requests ({problems}). Check the servers' URLs, the model name "
                "and the API key variable (api_key_env), then rerun the same command to resume."
            )
            self._stopping = True
            return
        now = self.clock()
        if self.stats.waiting_since is None:
            self.stats.waiting_since = now
        if now - self._last_wait_log >= 60:
            self._last_wait_log = now
            log.warning(
                "no server is usable (%s); waiting and probing every %.0fs — nothing is being marked failed",
                "; ".join(f"{s.url}: {s.problem}" for s in self.servers),
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
        assert self._session is not None
        work.attempts += 1
        if work.first_wall is None:
            work.first_wall = self.wall()
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
        try:
            gen = await self.backend.generate(self._session, server.url, work.current)
        except MisconfiguredError as exc:
            self._set_aside(server, exc.message, misconfigured=True)
            work.attempts -= 1
            self._requeue(work, 0.0)
        except PermanentError as exc:
            self._observe(server, start, None, exc)
            server.consecutive_failures = 0
            server.failed += 1
            self._record_failure(work, exc, server)
        except TransientError as exc:
            self._observe(server, start, None, exc)
            self._on_transient(work, server, exc)
        else:
            self._observe(server, start, gen, None)
            self._on_success(work, server, gen, self.clock() - start)

    def _observe(self, server: ServerState, start: float, gen: Generation | None, exc: Exception | None) -> None:
        if self.observer is None:
            return
        outcome = RequestOutcome(
            server=server.url,
            latency_s=self.clock() - start,
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

    def _on_success(self, work: Work, server: ServerState, gen: Generation, latency: float) -> None:
        server.consecutive_failures = 0
        server.completed += 1
        server.prompt_tokens += gen.prompt_tokens or 0
        server.completion_tokens += gen.completion_tokens or 0
        self.stats.prompt_tokens += gen.prompt_tokens or 0
        self.stats.completion_tokens += gen.completion_tokens or 0
        followups = work.prompt.followups
        if followups:
            turns = work.turns if work.turns is not None else []
            work.turns = turns
            turns.append(turn_record(gen, server.url, latency))
            if len(turns) <= len(followups):  # the next user turn, with the answers so far as history
                history = work.current.messages or []
                conversation = [*history, {"role": "assistant", "content": gen.text}, followups[len(turns) - 1]]
                work.sending = Prompt(id=work.prompt.id, messages=conversation, source=work.prompt.source)
                work.affinity, work.strikes = server.url, 0
                self._ready.appendleft(work)
                return
        self.stats.completed += 1
        answered = work.turns
        prompt_tokens, completion_tokens = gen.prompt_tokens, gen.completion_tokens
        if answered:
            prompt_tokens = sum(t["prompt_tokens"] or 0 for t in answered)
            completion_tokens = sum(t["completion_tokens"] or 0 for t in answered)
        self.sink.write(
            Completion(
                id=work.prompt.id,
                prompt=[*work.prompt.messages, *followups]
                if followups and work.prompt.messages
                else work.prompt.payload(),
                completion=gen.text,
                finish_reason=gen.finish_reason,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                model=self.model,
                sampling=self.sampling,
                server=server.url,
                latency_s=round(latency, 4),
                attempts=work.attempts,
                started_at=round(work.first_wall or self.wall(), 3),
                finished_at=round(self.wall(), 3),
                reasoning_content=gen.reasoning_content,
                prompt_token_ids=gen.prompt_token_ids,
                completion_token_ids=gen.completion_token_ids,
                turns=answered,
            )
        )

    def _on_transient(self, work: Work, server: ServerState, exc: TransientError) -> None:
        server.errors += 1
        if exc.status in (429, 503):
            server.throttled += 1
        server.consecutive_failures += 1
        self.stats.retries += 1
        self.stats.recent_failures.append(f"{server.url}: {exc.message}")
        if server.consecutive_failures >= self.retry.quarantine_after and server.usable:
            self._set_aside(server, f"{server.consecutive_failures} failures in a row, last: {exc.message}")
        if exc.counts_against_prompt:
            work.strikes += 1
        work.last_server = server.url
        if work.strikes >= self.retry.max_attempts or work.attempts >= HARD_ATTEMPT_FACTOR * self.retry.max_attempts:
            self._record_failure(work, exc, server)
            return
        delay = min(self.retry.backoff_max_s, self.retry.backoff_base_s * 2 ** min(work.attempts - 1, 30))
        self._requeue(work, delay * self.rng.uniform(0.5, 1.5))

    def _requeue(self, work: Work, delay: float) -> None:
        if delay <= 0:
            self._ready.append(work)
            return
        self._delayed += 1
        asyncio.get_running_loop().call_later(delay, self._retry_ready, work)

    def _retry_ready(self, work: Work) -> None:
        self._delayed -= 1
        self._ready.append(work)
        self._wake.set()

    def _record_failure(self, work: Work, exc: RequestError, server: ServerState) -> None:
        self.stats.failed += 1
        self.sink.fail(
            Failure(
                id=work.prompt.id,
                prompt=work.prompt.payload(),
                error_type=type(exc).__name__,
                error=exc.message,
                http_status=exc.status,
                server=server.url,
                attempts=work.attempts,
                finished_at=round(self.wall(), 3),
            )
        )

    # ---- server health ------------------------------------------------------------------------------------

    def _set_aside(self, server: ServerState, why: str, misconfigured: bool = False) -> None:
        if server.usable:
            log.warning("setting server %s aside: %s", server.url, why)
        server.usable = False
        server.problem = why
        server.misconfigured = misconfigured
        server.set_aside_at = self.clock()
        self._wake.set()

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retry.probe_interval_s)
            for server in self.servers:
                if server.usable or server.misconfigured:
                    continue
                assert self._session is not None
                if await self.probe(self._session, server.url):
                    log.warning("server %s answers again; sending it work", server.url)
                    server.usable = True
                    server.problem = None
                    server.consecutive_failures = 0
                    self._wake.set()


_gc_runs: list[tuple[int, int, int]] = []  # thresholds before the first of the runs in progress


@contextlib.contextmanager
def _gc_for_run() -> Iterator[None]:
    """Move what exists now (modules, config, the done set) out of the collector's way and collect less
    often while runs last; the previous thresholds come back when the last one ends."""
    _gc_runs.append(gc.get_threshold())
    gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        yield
    finally:
        before = _gc_runs.pop()
        if not _gc_runs:
            gc.set_threshold(*before)
            gc.unfreeze()


def turn_record(gen: Generation, server: str, latency: float) -> dict[str, Any]:
    """One answered turn of a multi-turn regeneration, as kept in ``Completion.turns``."""
    turn: dict[str, Any] = {
        "completion": gen.text,
        "finish_reason": gen.finish_reason,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.completion_tokens,
        "server": server,
        "latency_s": round(latency, 4),
    }
    if gen.reasoning_content is not None:
        turn["reasoning_content"] = gen.reasoning_content
    if gen.completion_token_ids is not None:
        turn["prompt_token_ids"] = gen.prompt_token_ids
        turn["completion_token_ids"] = gen.completion_token_ids
    return turn


async def probe_health(session: aiohttp.ClientSession, url: str) -> bool:
    """True when the server answers ``/health`` (or ``/v1/models`` where there is no ``/health``) with 200."""
    timeout = aiohttp.ClientTimeout(total=10.0)
    for path in ("/health", "/v1/models"):
        try:
            async with session.get(url + path, timeout=timeout) as resp:
                if resp.status == 200:
                    return True
                if resp.status != 404:
                    return False
        except (aiohttp.ClientError, TimeoutError):
            return False
    return False
