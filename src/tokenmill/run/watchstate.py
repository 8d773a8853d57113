"""What the watch hands the tracker each tick: one frozen :class:`WatchState` (``RunMonitor.state()``).

Watching flows one way: the monitor (:class:`tokenmill.run.watch.RunMonitor`) scrapes, asks the doctor and the
planner, and copies what the displays need into a value that never changes afterwards; the tracker
(:class:`tokenmill.run.progress.Tracker`) builds the tick's snapshot from that value and the dispatcher's counters,
and never reads the monitor itself. A run without a monitor (or a test) hands :data:`UNWATCHED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenmill.doctor.predict import Expected
    from tokenmill.monitor.fleet import ServerView
    from tokenmill.monitor.snapshot import Diagnosis


def frozen_map(items: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A read-only copy of ``items`` (later changes to ``items`` do not show through)."""
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True, slots=True)
class WatchState:
    """The monitor's numbers at one moment, as the tracker reads them (no reference back to the monitor)."""

    views: tuple[ServerView, ...] = ()  # each server as last scraped (ServerView is itself frozen)
    verdicts: tuple[Diagnosis, ...] = ()  # the doctor's shown verdicts, ranked
    binding: str | None = None  # the resource that bound longest so far
    cpu: float | None = None  # the client process's CPU, share of one core
    loop_lag_s: float | None = None  # how late the monitor's timer fired
    autotune: str | None = None  # what --autotune is doing (one line), when it runs
    answers: int = 0  # answers received this run (every turn counts), and those cut at max_tokens
    truncated: int = 0
    mean_output: float | None = None  # mean output tokens of an answer so far
    max_tokens: int | None = None  # the job's sampling.max_tokens
    conversation_turns: str | None = None  # input.conversation_turns
    planned: Mapping[str, float] = field(default_factory=frozen_map)  # each server's planned tok/s (wall clock)
    expected: Mapping[str, Expected] = field(default_factory=frozen_map)  # the planner's, on each server's clock
    compared: Mapping[str, Expected] = field(default_factory=frozen_map)  # monitor.compare_gpu's the same

    def view(self, url: str) -> ServerView | None:
        """The latest view of ``url`` (None: not watched, or not scraped yet)."""
        return next((v for v in self.views if v.url == url and v.scrapes), None)


UNWATCHED = WatchState()
