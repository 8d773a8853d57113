"""The garbage collector while runs dispatch: what exists when a run starts (modules, config, the done set) frozen
out of its way, and collections less often until the last run in progress ends.

Every request allocates a few hundred short-lived objects; with the default threshold (700) the collector runs
every few requests and rescans all long-lived objects often. These are process-wide settings: the thresholds in
force before the first of the runs in progress come back when the last one ends.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_GC_THRESHOLDS = (20_000, 20, 20)


_gc_runs: list[tuple[int, int, int]] = []  # thresholds before the first of the runs in progress


@contextlib.contextmanager
def collect_less() -> Iterator[None]:
    """Move what exists now (modules, config, the done set) out of the collector's way and collect less
    often while runs last; the previous thresholds come back when the last one ends."""
    _gc_runs.append(gc.get_threshold())
    gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        yield
    finally:
        before = _gc_runs.pop()
        if not _gc_runs:
            gc.set_threshold(*before)
            gc.unfreeze()
