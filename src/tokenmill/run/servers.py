"""The servers of a run as the dispatcher sees them: who may get the next request, who is set aside, and the
fleet's hooks (drain, add).

Selection: among the usable, undrained servers with a free slot, the conversation's own server first (its
prefix cache holds the history), then any server but the one that just failed this prompt, then the most free
slots, then the fewest errors. A server that fails ``quarantine_after`` times in a row, or refuses the job
(misconfigured), is set aside; the dispatcher probes set-aside servers (not misconfigured ones) and takes each
back when it answers.

Overload is not death: a request that times out on a server that holds a queue or runs requests (its latest
scrape says so, with its decode counter moving) or that answered another request since this one was sent is the
server's work outgrowing the read timeout, in one of two ways (:meth:`ServerPool.overloaded`):

- **in its queue** (the latest scrape shows a queue that can hold a request that long: queued / running x the
  mean latency of its completions, at least half the read timeout): the server's in-flight cap
  (``timeout_cap``) is cut at once to what it runs, so nothing waits in its queue any more (once per round trip:
  requests sent before the last cut do not cut again); without a queue gauge, by the backoff factor, never below
  what it was seen running. The concurrency controller respects the cap too;
- **while it ran** (no queue, or one too short for that wait): the client's timeout is shorter than the work.
  The server's read timeout grows by ``growth`` (once per round trip) up to the ceiling
  (``retry.read_timeout_max_s``); at the ceiling its in-flight cap drops instead (fewer running, a faster step,
  each answer sooner).

Either way the server stays in use.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

TimeoutKind = Literal["queue", "work"]  # where a busy server's request outlived the read timeout


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
    queued: float | None = None  # the latest healthy scrape's queue and running gauges (None: not known now)
    running: float | None = None
    last_completed_at: float | None = None  # the dispatcher's clock at its last completion
    latency_s: float = 0.0  # summed latency of its completions (their output tokens over this: a request's rate)
    timeouts: int = 0  # requests that timed out while it was overloaded (not failures of the server)
    last_timeout_at: float | None = None
    abandoned_tokens: float = 0.0  # estimated output tokens of those requests, decoded and thrown away
    timeout_cap: int | None = None  # the in-flight cap its timeouts set (None: none)
    cut_at: float | None = None  # when that cap was last lowered
    read_timeout_s: float | None = None  # its requests' read timeout (None: the job's retry.read_timeout_s)
    work_timeouts: int = 0  # of ``timeouts``, those while it ran the request (no queue): the work outlived it
    timeout_grown_at: float | None = None  # when its read timeout last grew
    work_cuts: int = 0  # in-flight cuts because the work outlived the read timeout at its ceiling
    last_timeout: TimeoutKind | None = None  # the kind of its last busy timeout
    cap_from: TimeoutKind | None = None  # which kind set ``timeout_cap``

    def saw(self, queued: float | None, running: float | None, decode_tok_s: float | None) -> None:
        """The latest scrape's gauges (None: no healthy scrape). A server whose decode counter stands still
        while it holds requests is stuck, not busy (the fleet's watchdog restarts it): its gauges count for
        nothing."""
        stuck = decode_tok_s is not None and decode_tok_s <= 0 and bool(queued or running)
        self.queued, self.running = (None, None) if stuck else (queued, running)

    def busy_since(self, sent: float) -> bool:
        """Whether the server shows it works: a queue or running requests at its latest scrape, or another
        completion after ``sent`` (a hung or dead server neither answers its scrape nor completes anything)."""
        if (self.queued or 0) > 0 or (self.running or 0) > 0:
            return True
        return self.last_completed_at is not None and self.last_completed_at > sent

    def queue_holds(self, waited_s: float) -> bool:
        """Whether its queue can have held a request for ``waited_s``: a queue at its latest scrape whose wait
        (queued / running x the mean latency of its completions) is at least half of that. True when that is not
        known (no queue gauge, or no completion yet): the timeout is then read as a queue wait."""
        if self.queued is None:
            return True
        if self.queued <= 0:
            return False
        if not self.completed or not self.running:
            return True
        return self.queued / self.running * (self.latency_s / self.completed) >= waited_s / 2

    def request_rate(self) -> float | None:
        """Output tokens per second of one of its requests, as its completions showed (None before one)."""
        return self.completion_tokens / self.latency_s if self.latency_s > 0 and self.completion_tokens else None

    def take_back(self) -> None:
        """Usable again, with a clean record of failures."""
        self.usable, self.problem, self.consecutive_failures = True, None, 0


@dataclass(frozen=True, slots=True)
class ReadTimeouts:
    """The read timeout a server's requests start with, how it grows when answers outlive it, and its ceiling."""

    start_s: float
    max_s: float
    growth: float = 2.0


class ServerPool:
    """The run's servers; ``on_change`` is called whenever one may now take work (it wakes the loop).

    ``concurrency`` is the most in flight per server; servers start at ``start`` (default: that) until the
    concurrency controller has seen what they hold."""

    def __init__(
        self,
        urls: list[str],
        concurrency: int,
        *,
        adaptive: bool = False,
        backoff: float = 0.7,
        start: int | None = None,
        timeouts: ReadTimeouts | None = None,
    ) -> None:
        self.start_limit = start if start is not None else concurrency
        self.servers = [ServerState(url=u, limit=self.start_limit) for u in urls]
        self.first_limit = concurrency
        self.adaptive = adaptive  # limits are set by the concurrency controller while running
        self.backoff = backoff  # the in-flight cap's factor after an overload timeout (control.throttle_factor)
        self.timeouts = timeouts
        self.on_change: Callable[[], None] = lambda: None
        self.on_new_process: Callable[[str], None] = lambda _url: None  # the server may be another process now

    def pick(self, affinity: str | None = None, avoid: str | None = None) -> ServerState | None:
        """The server for the next request (see the module docstring), or None if none has a free slot."""
        best: ServerState | None = None
        best_key: tuple[bool, bool, int, int] | None = None
        for s in self.servers:
            if not s.usable or s.draining or s.inflight >= s.limit:
                continue
            key = (s.url == affinity, s.url != avoid, s.limit - s.inflight, -s.errors)
            if best_key is None or key > best_key:
                best, best_key = s, key
        return best

    def any_usable(self) -> bool:
        return any(s.usable and not s.draining for s in self.servers)

    def all_misconfigured(self) -> bool:
        return all(s.misconfigured for s in self.servers)

    def problems(self) -> str:
        return "; ".join(f"{s.url}: {s.problem}" for s in self.servers)

    def set_aside(self, server: ServerState, why: str, now: float, misconfigured: bool = False) -> None:
        if server.usable:
            log.warning("setting server %s aside: %s", server.url, why)
        server.usable = False
        server.problem = why
        server.misconfigured = misconfigured
        server.set_aside_at = now
        self.on_new_process(server.url)
        self.on_change()

    def overloaded(self, server: ServerState, sent: float, now: float) -> TimeoutKind | None:
        """A request sent at ``sent`` timed out at ``now``: "queue" or "work" when ``server`` was busy (see the
        module docstring; its in-flight cap or read timeout adjusted once per round trip), None when it looks
        dead."""
        if not server.busy_since(sent):
            return None
        server.timeouts += 1
        server.last_timeout_at = now
        if (server.running or 0) > 0 and not server.queue_holds(now - sent):
            server.work_timeouts += 1
            server.last_timeout = "work"
            self._outlived(server, sent, now)
            return "work"
        server.last_timeout = "queue"
        if server.cut_at is not None and sent <= server.cut_at:
            return "queue"  # sent before the last cut: that cut already answered this queue
        current = min(server.limit, server.timeout_cap or server.limit)
        if server.queued is not None and server.running is not None:
            cap, how = max(1, round(server.running)), "what it runs"  # nothing waits in its queue any more
        else:
            cap, how = max(max(1, round(server.running or 0)), math.floor(current * self.backoff)), "backed off"
        if cap < current:
            log.warning(
                "%s: requests waited longer than the read timeout in its queue; in-flight cap %d -> %d (%s)",
                server.url,
                current,
                cap,
                how,
            )
        self._cap(server, cap, now, "queue wait > read timeout: cut to what it runs", "queue")
        return "queue"

    def _cap(self, server: ServerState, cap: int, now: float, why: str, kind: TimeoutKind) -> None:
        server.timeout_cap, server.cut_at, server.cap_from = cap, now, kind
        server.limit = min(server.limit, cap)
        server.limit_reason = why

    def _outlived(self, server: ServerState, sent: float, now: float) -> None:
        """A request ran longer than the read timeout: the timeout grows to its ceiling, then the running drops."""
        spec = self.timeouts
        if spec is None:
            return
        current = server.read_timeout_s or spec.start_s
        if server.timeout_grown_at is not None and sent <= server.timeout_grown_at:
            return  # sent with the timeout before the last growth
        if current < spec.max_s:
            grown = min(spec.max_s, current * spec.growth)
            log.warning(
                "%s: an answer took longer than the read timeout while the server ran it (nothing queued): read "
                "timeout %.0f s -> %.0f s (ceiling retry.read_timeout_max_s %.0f s)",
                server.url,
                current,
                grown,
                spec.max_s,
            )
            server.read_timeout_s, server.timeout_grown_at = grown, now
            return
        if server.cut_at is not None and sent <= server.cut_at:
            return
        limit = min(server.limit, server.timeout_cap or server.limit)
        cap = max(1, math.floor(min(limit, max(1, round(server.running or limit))) * self.backoff))
        if cap < limit:
            log.warning(
                "%s: answers take longer than the read timeout at its ceiling (%.0f s) while running: in-flight cap "
                "%d -> %d (fewer running, each answer sooner)",
                server.url,
                spec.max_s,
                limit,
                cap,
            )
            server.work_cuts += 1
        self._cap(server, cap, now, "answers outlive the read timeout's ceiling: fewer running", "work")

    def to_probe(self) -> list[ServerState]:
        """Servers set aside for failures (a misconfigured server stays aside until the fleet takes it back)."""
        return [s for s in self.servers if not s.usable and not s.misconfigured]

    def answered(self, server: ServerState) -> None:
        log.warning("server %s answers again; sending it work", server.url)
        server.take_back()
        self.on_new_process(server.url)
        self.on_change()

    # ---- the fleet's hooks (the servers file: restarts, re-flags, added servers) ------------------------------

    def server_urls(self) -> dict[str, bool]:
        """Each server's URL and whether it is drained (what the fleet's endpoints file is compared with)."""
        return {s.url: s.draining for s in self.servers}

    def set_draining(self, url: str, draining: bool) -> None:
        """Send ``url`` no new requests (those in flight finish), or use it again. A server taken back counts
        as healthy (the fleet waited for its health)."""
        for s in self.servers:
            if s.url == url:
                s.draining = draining
                if not draining:
                    s.timeout_cap = None  # another process, maybe other flags: its own queue to learn
                    s.read_timeout_s = s.timeout_grown_at = None
                if not draining and not s.misconfigured:
                    s.take_back()
        self.on_new_process(url)  # drained for a restart or re-flag, or back from one
        self.on_change()

    def add_server(self, url: str) -> None:
        """Start sending work to one more server (the fleet added or moved one)."""
        if url not in self.server_urls():
            self.servers.append(ServerState(url=url, limit=self.start_limit))
            self.on_change()
