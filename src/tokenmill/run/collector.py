"""The garbage collector while runs dispatch: what exists when a run starts (modules, config, the done set) frozen
out of its way, and collections less often until the last run in progress ends.

Every request allocates a few hundred short-lived objects; with the default threshold (700) the collector runs
every few requests and rescans all long-lived objects often. A young collection scans what is young and alive,
and a request in flight holds a few dozen tracked objects (its task, coroutines, context, aiohttp's request and
response): with a fixed threshold, a run with many requests in flight keeps reaching it with nothing but live
requests to scan (at 1,024 in flight, collections of ~30,000 objects, 2 ms each; bench/overhead.py). So the young
threshold grows with the run's in-flight bound, :data:`YOUNG_PER_REQUEST` objects a request, never below
:data:`RUN_GC_THRESHOLDS`' own. These are process-wide settings: the thresholds in force before the first of the
runs in progress come back when the last one ends.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_GC_THRESHOLDS = (20_000, 20, 20)
YOUNG_PER_REQUEST = 64  # twice the tracked objects a request in flight was seen to hold


_gc_runs: list[tuple[int, int, int]] = []  # thresholds before the first of the runs in progress


def thresholds(inflight: int = 0) -> tuple[int, int, int]:
    """The collector's thresholds for a run of at most ``inflight`` requests in flight (0: not known)."""
    young, middle, old = RUN_GC_THRESHOLDS
    return max(young, YOUNG_PER_REQUEST * inflight), middle, old


@contextlib.contextmanager
def collect_less(inflight: int = 0) -> Iterator[None]:
    """Move what exists now (modules, config, the done set) out of the collector's way and collect less
    often while runs last (for runs of up to ``inflight`` requests in flight); the previous thresholds come back
    when the last one ends."""
    _gc_runs.append(gc.get_threshold())
    gc.freeze()
    gc.set_threshold(*thresholds(inflight))
    try:
        yield
    finally:
        before = _gc_runs.pop()
        if not _gc_runs:
            gc.set_threshold(*before)
            gc.unfreeze()
