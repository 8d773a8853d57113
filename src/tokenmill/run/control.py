"""Each server's in-flight target, learned from its metrics: ``concurrency: auto``, and a fixed ``concurrency: N``
as its ceiling.

The right number of requests in flight at a server is what it can actually run plus a small queue that
hides the round trip. Too few and its GPU idles; too many and requests wait in its queue, adding latency and
becoming lost work when the client restarts. Each monitor round, per server:

1. a 429 or 503 since the last round (the server refuses work): multiply the target by ``throttle_factor``;
2. the server reports its cap (SGLang ``max_running_requests``): capacity is that cap — unless it holds a
   queue while running clearly fewer (admission bound by the KV or state pool) or retracts/preempts requests,
   in which case capacity is what it actually runs. The queue that counts as standing is half the one this
   rule keeps, so a server held at what it runs stays recognised as pool-bound (no flip back to the cap);
   when its pool frees up it admits that queue, the queue vanishes and the target returns to the cap;
3. no cap, but running/queued metrics (vLLM): a standing queue means capacity is what it runs; no queue while
   the client fills its target means the client limits, so the target grows by ``grow_factor``;
4. no metrics at all: the target stays at ``initial`` (recovering there after a throttle).

target = capacity + clamp(ceil(queue_frac x capacity), queue_min, queue_max), within [min, max].

"What it runs" is the most it ran at any of the last ``PEAK_ROUNDS`` scrapes (the latest gauges, not the
monitor's window means, which lag by the whole window and start from an idle server): a scrape caught while
a burst is still being prefilled must not shrink the target below what the server has shown it can run.
The standing queue is the latest one or the window mean, whichever is larger.

A server whose requests time out in its queue (:meth:`~tokenmill.run.servers.ServerPool.overloaded`) carries a
``timeout_cap``: the target never exceeds it. That cap is what the server ran when it was cut, and follows what it
runs from then on (a pool that frees up admits more: it may be sent more, still with no queue above it); a cap set
because answers outlived the read timeout's ceiling stays where it was cut.

With a fixed ``concurrency: N`` the same rules run with N as the ceiling (``ceiling``): a server that says what it
holds is sent at most that plus the small queue, never N requests of which most would wait in its queue and
outlive the read timeout there. Until a server's first scrape it gets ``min(N, initial)``; a server with no
metrics at all gets N.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from tokenmill.config import ControlSpec
from tokenmill.monitor.fleet import FleetMonitor, ServerView
from tokenmill.run.servers import ServerState

log = logging.getLogger(__name__)

# Running below this fraction of the cap while a queue stands means admission is bound by a memory pool.
POOL_BOUND_FRACTION = 0.9
# Rounds over which the most a server ran counts as what it can run.
PEAK_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Observation:
    """What one round tells about one server."""

    max_running: int | None
    running: float | None  # the most it ran at the last few scrapes
    queued: float | None
    preempting: bool
    throttled: int  # 429/503 answers since the last round
    client_full: bool  # the client had the whole target in flight
    running_now: float | None = None  # at the latest scrape (None: take ``running``)


def queue_for(capacity: int, spec: ControlSpec) -> int:
    """The queue kept above ``capacity``."""
    return max(spec.queue_min, min(spec.queue_max, math.ceil(spec.queue_frac * capacity)))


def next_target(current: int, obs: Observation, spec: ControlSpec) -> tuple[int, str]:
    """The new in-flight target for one server and the reason, as shown on the dashboard."""
    if obs.throttled:
        return _clamp(math.floor(current * spec.throttle_factor), spec), f"throttled ({obs.throttled}x 429/503)"
    running = obs.running
    if obs.max_running:
        capacity, why = obs.max_running, f"server cap {obs.max_running}"
        if running is not None and obs.preempting:
            now = obs.running_now if obs.running_now is not None else running
            capacity, why = max(1, round(now)), "retracting: what it runs"
        elif (
            running is not None
            and obs.queued is not None
            and obs.queued >= max(1.0, queue_for(max(1, round(running)), spec) / 2)
            and running < POOL_BOUND_FRACTION * obs.max_running
        ):
            capacity, why = max(1, round(running)), f"pool-bound at {running:.0f} of cap {obs.max_running}"
        return _clamp(capacity + queue_for(capacity, spec), spec), why
    if running is not None and obs.queued is not None:
        capacity = max(1, round(running))
        if obs.queued >= queue_for(capacity, spec):
            return _clamp(capacity + queue_for(capacity, spec), spec), "queue standing: what it runs"
        if obs.client_full:
            return _clamp(math.ceil(current * spec.grow_factor), spec), "client-limited: growing"
        return current, "steady"
    if current < spec.initial:
        return _clamp(math.ceil(current * spec.grow_factor), spec), "no metrics: recovering"
    return current, "no metrics"


def _clamp(value: int, spec: ControlSpec) -> int:
    return max(spec.min, min(spec.max, value))


class ConcurrencyController:
    """Sets ``ServerState.limit`` (and ``limit_reason``) of every server after each monitor round.

    ``servers`` is the dispatcher's own list, read afresh each round: servers the fleet adds later start at
    ``initial`` and are steered from their first scrape on. ``ceiling``: a fixed concurrency N (see the module
    docstring); None for ``concurrency: auto``.
    """

    def __init__(self, servers: Sequence[ServerState], spec: ControlSpec, ceiling: int | None = None) -> None:
        self.ceiling = ceiling
        if ceiling is not None:
            spec = spec.model_copy(update={"max": ceiling, "initial": min(ceiling, spec.initial)})
        self.spec = spec
        self._servers = servers
        self._throttled_seen = {s.url: s.throttled for s in servers}
        self._running: dict[str, deque[float]] = {}  # the latest running gauge of the last rounds
        self.reasons: dict[str, str] = {}
        self.rounds = 0
        self._rounds_seen = 0
        for s in servers:
            s.limit = _clamp(spec.initial, spec)
            s.limit_reason = "initial"

    def follow(self, monitor: FleetMonitor) -> None:
        """Apply the monitor's latest round if this controller has not seen it yet (call it often)."""
        if monitor.rounds != self._rounds_seen:
            self._rounds_seen = monitor.rounds
            self.update(monitor.views)

    def update(self, views: Sequence[ServerView]) -> None:
        """Apply one monitor round (called beside the request path, never from it)."""
        self.rounds += 1
        states = {s.url: s for s in self._servers}
        for view in views:
            state = states.get(view.url)
            if state is None:
                continue
            if not view.healthy:
                if self.ceiling is not None and view.snapshot is None and view.scrapes:  # no metrics to be had
                    state.limit, state.limit_reason = self.ceiling, f"concurrency {self.ceiling} (no metrics)"
                continue
            throttled = state.throttled - self._throttled_seen.get(view.url, state.throttled)
            self._throttled_seen[view.url] = state.throttled
            running_now, running, queued = self._gauges(view)
            obs = Observation(
                max_running=view.max_running,
                running=running,
                running_now=running_now,
                queued=queued,
                preempting=bool(view.preemptions_per_min),
                throttled=throttled,
                client_full=state.inflight >= state.limit,
            )
            target, why = next_target(state.limit, obs, self.spec)
            if self.ceiling is not None:
                target, why = self._fixed(target, why, view)
            if state.timeout_cap is not None and state.cap_from == "queue" and running is not None:
                state.timeout_cap = max(state.timeout_cap, round(running))  # what it runs, no queue above it
            if state.timeout_cap is not None and target > state.timeout_cap:
                target, why = state.timeout_cap, f"queue wait > read timeout: capped at {state.timeout_cap}"
            if target != state.limit:
                log.info("%s: in-flight target %d -> %d (%s)", view.url, state.limit, target, why)
                state.limit = target
            self.reasons[view.url] = why
            state.limit_reason = why

    def _fixed(self, target: int, why: str, view: ServerView) -> tuple[int, str]:
        """A fixed concurrency: N for a server without metrics, else the adaptive target (N at most)."""
        assert self.ceiling is not None
        snap = view.snapshot
        metrics = view.max_running or (snap is not None and (snap.running is not None or snap.queued is not None))
        if not metrics:
            return self.ceiling, f"concurrency {self.ceiling} (no metrics)"
        if target >= self.ceiling:
            return self.ceiling, f"concurrency {self.ceiling}"
        return target, f"{why}, within concurrency {self.ceiling}"

    def _gauges(self, view: ServerView) -> tuple[float | None, float | None, float | None]:
        """What the server runs now and at its recent peak, and its standing queue."""
        snap = view.snapshot
        now_running = snap.running if snap is not None else None
        if now_running is None:
            now_running = view.running
        running = None
        if now_running is not None:
            recent = self._running.setdefault(view.url, deque(maxlen=PEAK_ROUNDS))
            recent.append(now_running)
            running = max(recent)
        now_queued = snap.queued if snap is not None else None
        candidates = [q for q in (now_queued, view.queued) if q is not None]
        return now_running, running, max(candidates) if candidates else None
