"""Small time-series helpers: counter rates over a window, gauge means, a bounded history, CPU use.

Every helper takes time as an argument (never reads a clock), so tests drive them with made-up times.
Memory is bounded by the window, not by the run's length.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

SPARK_CHARS = "▁▂▃▄▅▆▇█"


class Window:
    """Rate of a monotonically increasing counter over the last ``span_s`` seconds.

    A counter that goes down (a restarted server) starts the window afresh, so no negative rate appears.
    """

    def __init__(self, span_s: float) -> None:
        self.span_s = span_s
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> None:
        if self.samples and value < self.samples[-1][1]:
            self.samples.clear()
        self.samples.append((t, value))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.span_s:
            self.samples.popleft()

    def rate(self) -> float:
        """Per second; 0 with fewer than two samples."""
        if len(self.samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0

    def rate_or_none(self) -> float | None:
        """Per second; ``None`` until two samples are in."""
        return self.rate() if len(self.samples) >= 2 else None


class GaugeWindow:
    """Mean and maximum of a gauge over the last ``span_s`` seconds (``None`` values are not counted)."""

    def __init__(self, span_s: float) -> None:
        self.span_s = span_s
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float | None) -> None:
        if value is not None:
            self.samples.append((t, value))
        while self.samples and t - self.samples[0][0] > self.span_s:
            self.samples.popleft()

    def mean(self) -> float | None:
        if not self.samples:
            return None
        return sum(v for _, v in self.samples) / len(self.samples)

    def max(self) -> float | None:
        return max((v for _, v in self.samples), default=None)

    def min(self) -> float | None:
        return min((v for _, v in self.samples), default=None)


class History:
    """The last ``size`` values of a series (the dashboard's sparkline)."""

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self.values.append(value)


def sparkline(values: Iterable[float]) -> str:
    """One block character per value, scaled from 0 to the largest value."""
    vals = list(values)
    top = max(vals, default=0.0)
    if top <= 0:
        return SPARK_CHARS[0] * len(vals)
    last = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[min(last, max(0, round(v / top * last)))] for v in vals)


class CpuMeter:
    """CPU time this process used per second of wall time since the previous sample (1.0 = one full core)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, cpu: Callable[[], float] = time.process_time
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self._last = (clock(), cpu())

    def sample(self) -> float | None:
        now, used = self._clock(), self._cpu()
        (t0, c0), self._last = self._last, (now, used)
        return (used - c0) / (now - t0) if now > t0 else None
