"""The run's ETA: the measured completion rate, or the planner's capacity at each server's fitted η while the
measured rate does not yet speak for the fleet as it is.

* **Measured**: the prompts left over the prompts done per second in the rate window (``comp_s``). It holds
  everything the planner does not model (prefill interference, retractions, an under-fed server), but it needs a
  whole window of the fleet as it is now.
* **Planned**: the prompts left, times the mean answer's output tokens, over the sum of every usable server's
  planned output rate: the planner's capacity of the server as it runs (its flags, the job's request kind, at most
  the client's in-flight limit running) at the η fitted to its own decode samples (:mod:`tokenmill.run.efficiency`),
  on the wall clock.

:class:`EtaRule` takes the planned ETA while less than one rate window has passed since the run started or since
the usable servers last changed (one joined, left, was set aside or came back re-flagged), provided every usable
server has a planned rate and an answer has come back; and when nothing has completed in the window yet. Otherwise
the measured one; None when there is neither.

Either way the ETA is at least what the requests in flight still need (:func:`in_flight_s`): the prompts not yet
sent at the measured rate, then one mean request latency for the last of them; once every prompt left is in
flight, the mean latency less the time since the last request was sent. A rate alone undercounts the end of a
run: the last requests run at a batch's pace, not at the fleet's throughput (an "ETA 9s" with 10 prompts of
~30 s each in flight).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MEASURED = "measured"
PLANNED = "planned"


@dataclass(frozen=True, slots=True)
class Eta:
    """Seconds to the end of the run and what they rest on (``measured`` or ``planned``)."""

    seconds: float | None = None
    source: str | None = None


class EtaRule:
    """Chooses between the measured and the planned ETA (see the module docstring); times on the run's clock."""

    def __init__(self, window_s: float, started: float) -> None:
        self.window_s = window_s
        self._fleet: frozenset[str] | None = None
        self._since = started  # the start of the run, or the last change of the usable servers

    def estimate(
        self,
        now: float,
        remaining: int,
        comp_s: float,
        usable: frozenset[str],
        planned_tok_s: Mapping[str, float],
        mean_output: float | None,
        in_flight: float | None = None,
    ) -> Eta:
        """The ETA for ``remaining`` prompts, with ``comp_s`` prompts done per second in the window, ``usable`` the
        servers that may get requests now and ``planned_tok_s`` the planned output rate of each server it knows;
        never less than ``in_flight`` (:func:`in_flight_s`)."""
        eta = self._estimate(now, remaining, comp_s, usable, planned_tok_s, mean_output)
        if in_flight is None or remaining <= 0:
            return eta
        if eta.seconds is None:
            return Eta(in_flight, MEASURED)
        return Eta(max(eta.seconds, in_flight), eta.source)

    def _estimate(
        self,
        now: float,
        remaining: int,
        comp_s: float,
        usable: frozenset[str],
        planned_tok_s: Mapping[str, float],
        mean_output: float | None,
    ) -> Eta:
        if usable != self._fleet:
            if self._fleet is not None:
                self._since = now
            self._fleet = usable
        measured = remaining / comp_s if comp_s > 0 else None
        unfounded = measured is None or now - self._since < self.window_s
        rate = fleet_rate(usable, planned_tok_s)
        if unfounded and rate and mean_output:
            return Eta(max(0.0, remaining * mean_output / rate), PLANNED)
        if measured is not None:
            return Eta(max(0.0, measured), MEASURED)
        return Eta()


def fleet_rate(usable: frozenset[str], planned_tok_s: Mapping[str, float]) -> float | None:
    """The usable servers' planned output tok/s together; None unless every one of them has a planned rate."""
    if not usable or any(planned_tok_s.get(u) is None for u in usable):
        return None
    return sum(planned_tok_s[u] for u in usable)


def in_flight_s(
    remaining: int, inflight: int, comp_s: float, mean_latency_s: float | None, since_sent_s: float
) -> float | None:
    """What the ``remaining`` prompts need at least, ``inflight`` of them being answered now: the others at
    ``comp_s``, then a mean request latency for the last one sent; with all of them in flight, the mean latency
    less ``since_sent_s`` (the time since the last request was sent). None without a latency or a rate to go by."""
    if mean_latency_s is None or inflight <= 0 or remaining <= 0:
        return None
    queued = max(0, remaining - inflight)
    if queued == 0:
        return max(0.0, mean_latency_s - since_sent_s)
    if comp_s <= 0:
        return None
    return queued / comp_s + mean_latency_s
