"""Retrying a store call: StoreUnavailable retried with exponential backoff until it succeeds or a deadline passes.

Any other error escapes at once. One loop for every caller: the remote stage of a start
(:mod:`tokenmill.storage.restore`: a deadline of ``upload.start_wait_s``, plain sleeps) and the uploader (no
deadline of its own: its wait is cut short when the run is aborted or the end-of-run deadline passes). Time comes
from the caller's clock (:data:`Clock`), never from a clock read here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from tokenmill.config import UploadSpec, backoff
from tokenmill.errors import StoreUnavailable

T = TypeVar("T")

Clock = Callable[[], float]  # seconds, monotonic


class Retrying(Protocol):
    """A retry loop bound to its caller's clock and wait: ``retry("what", fn)`` (``what`` names it in the log)."""

    def __call__(self, what: str, fn: Callable[[], T], /) -> T: ...


def retry_until(
    fn: Callable[[], T],
    spec: UploadSpec,
    *,
    clock: Clock,
    sleep: Callable[[float], None],
    deadline: float | None = None,
    on_failure: Callable[[StoreUnavailable, float], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds. After each StoreUnavailable, ``on_failure(error, delay)`` is told and
    ``sleep(delay)`` waits the backoff (``spec.backoff_base_s`` doubling up to ``spec.backoff_max_s``, cut to what
    is left before ``deadline``); at ``deadline`` the last error is raised."""
    failures = 0
    while True:
        try:
            return fn()
        except StoreUnavailable as exc:
            failures += 1
            now = clock()
            if deadline is not None and now >= deadline:
                raise
            delay = backoff(failures, spec.backoff_base_s, spec.backoff_max_s)
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - now))
            if on_failure is not None:
                on_failure(exc, delay)
            sleep(delay)
