"""The servers of a run as the dispatcher sees them: who may get the next request, who is set aside, and the
fleet's hooks (drain, add).

Selection: among the usable, undrained servers with a free slot, the conversation's own server first (its
prefix cache holds the history), then any server but the one that just failed this prompt, then the most free
slots, then the fewest errors. A server that fails ``quarantine_after`` times in a row, or refuses the job
(misconfigured), is set aside; the dispatcher probes set-aside servers (not misconfigured ones) and takes each
back when it answers.

Overload is not death: a request that times out on a server that holds a queue or runs requests (its latest
scrape says so, with its decode counter moving) or that answered another request since this one was sent is the
queue's wait outgrowing the read timeout. :meth:`ServerPool.overloaded` then lowers that server's in-flight
cap (``timeout_cap``, by the backoff factor, once per round trip: requests sent before the last cut do not cut
again, and never below what it was seen running), which the concurrency controller respects too; the server
stays in use.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


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

    def request_rate(self) -> float | None:
        """Output tokens per second of one of its requests, as its completions showed (None before one)."""
        return self.completion_tokens / self.latency_s if self.latency_s > 0 and self.completion_tokens else None

    def take_back(self) -> None:
        """Usable again, with a clean record of failures."""
        self.usable, self.problem, self.consecutive_failures = True, None, 0


class ServerPool:
    """The run's servers; ``on_change`` is called whenever one may now take work (it wakes the loop)."""

    def __init__(self, urls: list[str], concurrency: int, *, adaptive: bool = False, backoff: float = 0.7) -> None:
        self.servers = [ServerState(url=u, limit=concurrency) for u in urls]
        self.first_limit = concurrency
        self.adaptive = adaptive  # limits are set by the concurrency controller while running
        self.backoff = backoff  # the in-flight cap's factor after an overload timeout (control.throttle_factor)
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

    def overloaded(self, server: ServerState, sent: float, now: float) -> bool:
        """A request sent at ``sent`` timed out at ``now``: True when ``server`` was busy (overload, see the
        module docstring), after lowering its in-flight cap once per round trip; False when it looks dead."""
        if not server.busy_since(sent):
            return False
        server.timeouts += 1
        server.last_timeout_at = now
        if server.cut_at is not None and sent <= server.cut_at:
            return True  # sent before the last cut: that cut already answered this queue
        floor = max(1, round(server.running or 0))
        current = min(server.limit, server.timeout_cap or server.limit)
        cap = max(floor, math.floor(current * self.backoff))
        if cap < current:
            log.warning(
                "%s: requests wait longer than the read timeout in its queue; in-flight cap %d -> %d",
                server.url,
                current,
                cap,
            )
        server.timeout_cap, server.cut_at = cap, now
        server.limit = min(server.limit, cap)
        server.limit_reason = "queue wait > read timeout: backed off"
        return True

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
                if not draining and not s.misconfigured:
                    s.take_back()
        self.on_new_process(url)  # drained for a restart or re-flag, or back from one
        self.on_change()

    def add_server(self, url: str) -> None:
        """Start sending work to one more server (the fleet added or moved one)."""
        if url not in self.server_urls():
            self.servers.append(ServerState(url=url, limit=self.first_limit))
            self.on_change()
