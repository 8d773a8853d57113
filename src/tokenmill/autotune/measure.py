"""Measuring a change on a live fleet: each server's decode rate over time windows, and whether a canary's gain
against its own rate before and against its peers' meanwhile is larger than the noise.

:class:`RateHistory` keeps, per server, the tokens it decoded while watched (the monitor's ``decoded_tokens``,
restarts accounted for) at each scrape, for a bounded span of time. :func:`measure` cuts a window into parts
and takes each part's rate (batch means): the spread of the parts is the noise. The gain against the peers is
the change of the canary's rate *relative to its peers'*, which a drift of the whole workload (prompts getting
longer, a run winding down) does not move.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from tokenmill.monitor.fleet import ServerView


class RateHistory:
    """Per server: (time, tokens decoded so far, healthy) at each scrape, for the last ``keep_s`` seconds."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._points: dict[str, deque[tuple[float, float, bool]]] = {}

    def add(self, t: float, views: Sequence[ServerView]) -> None:
        for v in views:
            points = self._points.setdefault(v.url, deque())
            points.append((t, v.decoded_tokens, v.healthy))
            while len(points) > 2 and t - points[1][0] >= self.keep_s:
                points.popleft()

    def covers(self, url: str, start: float, end: float) -> bool:
        """Whether ``url`` was watched, and up at every scrape, from ``start`` to ``end``."""
        points = self._points.get(url)
        if not points or points[0][0] > start or points[-1][0] < end:
            return False
        return all(up for t, _, up in points if start <= t <= end)

    def tokens_at(self, url: str, t: float) -> float | None:
        """Tokens decoded by ``t`` (linear between the scrapes around it); None outside what is kept."""
        points = self._points.get(url)
        if not points or t < points[0][0] or t > points[-1][0]:
            return None
        prev = points[0]
        for point in points:
            if point[0] >= t:
                if point[0] == prev[0]:
                    return point[1]
                return prev[1] + (point[1] - prev[1]) * (t - prev[0]) / (point[0] - prev[0])
            prev = point
        return prev[1]

    def rates(self, url: str, start: float, end: float, parts: int) -> list[float] | None:
        """``url``'s decode rate in each of ``parts`` equal parts of [start, end]; None if not covered."""
        if end <= start or parts < 1:
            return None
        edges = [start + (end - start) * i / parts for i in range(parts + 1)]
        tokens = [self.tokens_at(url, t) for t in edges]
        known = [x for x in tokens if x is not None]
        if len(known) != len(tokens):
            return None
        step = (end - start) / parts
        return [(b - a) / step for a, b in pairwise(known)]

    def scrapes(self, url: str, start: float, end: float) -> int:
        return sum(1 for t, _, _ in self._points.get(url, ()) if start <= t <= end)


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, math.inf
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(var / n)


def _ratio_gain(after: Sequence[float], before: Sequence[float]) -> tuple[float, float] | None:
    """mean(after) / mean(before) - 1 and its standard error (first-order, the two windows independent)."""
    a, sa = _mean_se(after)
    b, sb = _mean_se(before)
    if b <= 0:
        return None
    ratio = a / b
    rel = math.sqrt((sa / a) ** 2 + (sb / b) ** 2) if a > 0 else math.inf
    return ratio - 1, ratio * rel


@dataclass(frozen=True, slots=True)
class Measurement:
    """A canary's decode rate before and after a change, its peers' meanwhile, and the gain with its noise."""

    before: float  # the canary's mean decode tok/s over the window before the change
    after: float  # ... and over the window after it
    peers_before: float | None  # mean decode tok/s of one peer, over the same windows
    peers_after: float | None
    gain: float  # what decides: against the peers when there are some, else against the canary's own before
    stderr: float
    gain_self: float  # after / before - 1 of the canary alone
    gain_vs_peers: float | None  # (after / peers_after) / (before / peers_before) - 1
    seconds: float  # length of the window after the change

    def low(self, z: float) -> float:
        return self.gain - z * self.stderr

    def high(self, z: float) -> float:
        return self.gain + z * self.stderr

    def as_dict(self) -> dict[str, float | None]:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, nd)

        return {
            "gain": r(self.gain),
            "stderr": r(self.stderr),
            "gain_self": r(self.gain_self),
            "gain_vs_peers": r(self.gain_vs_peers),
            "before_tok_s": r(self.before, 1),
            "after_tok_s": r(self.after, 1),
            "peers_before_tok_s": r(self.peers_before, 1),
            "peers_after_tok_s": r(self.peers_after, 1),
            "seconds": r(self.seconds, 1),
        }


def measure(
    history: RateHistory,
    canary: str,
    peers: Sequence[str],
    before: tuple[float, float],
    after: tuple[float, float],
    parts: int,
) -> Measurement | None:
    """The canary's gain from ``before`` to ``after`` (each a (start, end) window), cut in ``parts``; None when the
    canary's rates are not known over both windows."""
    cb = history.rates(canary, *before, parts)
    ca = history.rates(canary, *after, parts)
    if cb is None or ca is None:
        return None
    own = _ratio_gain(ca, cb)
    if own is None:
        return None
    peer_rates = [(history.rates(p, *before, parts), history.rates(p, *after, parts)) for p in peers]
    known = [(b, a) for b, a in peer_rates if b is not None and a is not None]
    gain, stderr = own
    vs_peers = peers_before = peers_after = None
    if known:
        pb = [sum(b[i] for b, _ in known) / len(known) for i in range(parts)]
        pa = [sum(a[i] for _, a in known) / len(known) for i in range(parts)]
        peers_before, peers_after = sum(pb) / parts, sum(pa) / parts
        rb = [c / p for c, p in zip(cb, pb, strict=True) if p > 0]
        ra = [c / p for c, p in zip(ca, pa, strict=True) if p > 0]
        relative = _ratio_gain(ra, rb) if len(rb) >= 2 and len(ra) >= 2 else None
        if relative is not None:
            gain, stderr = relative
            vs_peers = gain
    return Measurement(
        before=sum(cb) / parts,
        after=sum(ca) / parts,
        peers_before=peers_before,
        peers_after=peers_after,
        gain=gain,
        stderr=stderr,
        gain_self=own[0],
        gain_vs_peers=vs_peers,
        seconds=after[1] - after[0],
    )
