"""Bucketed counts, Prometheus style: the one histogram of the client's metrics, the event log and the twin."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any


class Histogram:
    """Counts per upper bound (``le``, Prometheus style, plus +Inf) and a sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Record ``n`` observations of ``value`` (``sum`` grows by ``value * n``); one bisect."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= it)``; the last bound is +Inf."""
        out, acc = [], 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append((bound, acc))
        return out

    def as_dict(self) -> dict[str, Any]:
        """For the event log: bounds, per-bucket counts (the last is above every bound), sum and count."""
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.total, "count": self.count}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        hist = cls(data.get("bounds") or ())
        counts = list(data.get("counts") or ())
        if len(counts) == len(hist.counts):
            hist.counts = [int(c) for c in counts]
        hist.total = float(data.get("sum") or 0.0)
        hist.count = int(data.get("count") or 0)
        return hist

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0-1), linear within its bucket (the top bucket reads as its lower bound)."""
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        lower = 0.0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            if c and seen + c >= rank:
                if bound == float("inf"):
                    return lower
                return lower + (bound - lower) * max(0.0, rank - seen) / c
            seen += c
            lower = bound
        return lower
