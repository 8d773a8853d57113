"""Numbers as people read them, the same everywhere (dashboard, doctor, summary, status, plan, report)."""

from __future__ import annotations

UNKNOWN = "-"  # a value nobody measured


def duration(seconds: float | None) -> str:
    """``2d03h``, ``1h02m``, ``3m07s``, ``12s``; a time already past reads ``0s`` (never a negative duration)."""
    if seconds is None:
        return UNKNOWN
    s = max(0, int(seconds))
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def pct(x: float | None) -> str:
    """A fraction as a whole percentage: ``0.456`` -> ``46%``."""
    return UNKNOWN if x is None else f"{x * 100:.0f}%"


def num(x: float | None) -> str:
    """A count or rate: thousands separated, one decimal only for small fractional values (``2.5``, ``1,234``)."""
    if x is None:
        return UNKNOWN
    return f"{x:,.1f}" if 0 < abs(x) < 10 and not float(x).is_integer() else f"{x:,.0f}"
