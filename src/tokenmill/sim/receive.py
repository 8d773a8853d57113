"""An idle engine's receive window: a burst of separate requests sent together is received together, however
slowly the host runs.

SGLang's event loop receives, at the top of each iteration, everything its tokenizer manager has queued
(``recv_requests`` polls its socket until it is empty), then schedules; an idle server (``--sleep-on-idle``: a poll
on that socket) wakes on the first request of a burst and receives the rest with it when the rest is in. The
twin's HTTP layer and the clients that load it share the host with other work: the requests of a burst written
back to back reached the twin 1-2 ms apart on a quiet host and up to 30 ms apart beside two CPU hogs on two
cores (their writer preempted between two writes), so a window fixed in wall time or in event-loop passes split
such a burst about one time in twenty.

So an idle engine woken by an arrival waits for the rest of the burst until no request has come for a quiet span
that grows with how late the host has lately been running the engine's own timers (:class:`HostLag`: its timers
fire up to ~10 ms late beside two hogs, 0.3 ms on a quiet host), then a few event-loop passes more with none (the
HTTP layer hands a request over in 2-3). The virtual clock stands still meanwhile (the engine is idle), so the
window decides which requests share the first batch and never adds to a simulated duration. A busy engine needs
no window: requests that arrive while a step runs wait for its end and are received together there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["HEARTBEAT_S", "QUIET_PASSES", "HostLag", "ReceiveWindow"]

LAG_HALF_LIFE_S = 2.0  # a late wake counts for this long at full weight, then halves
HEARTBEAT_S = 0.1  # an idle engine wakes this often to see how late its timers run
LAG_FACTOR = 5.0  # the quiet span is this many times the host's recent lateness...
MIN_QUIET_S = 0.002  # ...and at least this (a quiet host: the HTTP layer's own hand-over)
MAX_QUIET_S = 0.1  # ...and at most this
MAX_WINDOW_S = 0.5  # a window never stays open longer, however requests keep arriving
QUIET_PASSES = 4  # event-loop passes with no arrival once the quiet span has passed


class HostLag:
    """How late the host has lately been running the engine's timers: the largest lateness seen, its weight halving
    every :data:`LAG_HALF_LIFE_S` seconds after it was seen. Times are the event loop's, in seconds."""

    def __init__(self) -> None:
        self._value = 0.0
        self._seen_at = 0.0

    def observe(self, due: float, woke: float) -> None:
        """A timer due at ``due`` ran at ``woke``."""
        self._value = max(self.at(woke), woke - due)
        self._seen_at = woke

    def at(self, t: float) -> float:
        """The lateness that still counts at ``t``."""
        return self._value * math.pow(0.5, max(0.0, t - self._seen_at) / LAG_HALF_LIFE_S)

    def quiet_span(self, t: float) -> float:
        """How long a receive window waits after the last arrival at ``t``."""
        return min(MAX_QUIET_S, max(MIN_QUIET_S, LAG_FACTOR * self.at(t)))


@dataclass
class ReceiveWindow:
    """Opened by the arrival that wakes an idle engine at ``opened``; closes a quiet span after the last arrival."""

    opened: float
    last_arrival: float = float("nan")

    def __post_init__(self) -> None:
        self.last_arrival = self.opened

    def arrived(self, t: float) -> None:
        self.last_arrival = t

    def closes_at(self, lag: HostLag) -> float:
        """When the window closes unless another request arrives first."""
        quiet = lag.quiet_span(self.last_arrival)
        return min(self.opened + MAX_WINDOW_S, self.last_arrival + quiet)
