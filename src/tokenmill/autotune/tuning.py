"""What autotune works with (:mod:`tokenmill.autotune.loop`): the fleet as an :class:`Actuator`, the tuner's
phases, one change tried and what became of it, and the worker thread a blocking re-flag runs on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from tokenmill.autotune.measure import Measurement

Say = Callable[[str], None]


class Actuator(Protocol):
    """What the tuner needs of a fleet."""

    def servers(self) -> list[str]:
        """Every server's base URL, in fleet order."""
        ...

    def refuse(self, change: str) -> str | None:
        """None when ``change`` may be applied; otherwise why not (a flag outside the allow-list, ...)."""
        ...

    def apply(self, change: str, urls: Sequence[str], say: Say) -> None:
        """Re-flag ``urls`` with the fleet's flags plus ``change`` (blocking); raises when a server fails."""
        ...

    def revert(self, urls: Sequence[str], say: Say) -> None:
        """Re-flag ``urls`` back to the fleet's flags (blocking)."""
        ...


class Phase(Enum):
    WATCHING = "watching"
    APPLYING = "applying"
    WARMUP = "warming up"
    MEASURING = "measuring"
    ROLLING_OUT = "rolling out"
    ROLLING_BACK = "rolling back"
    COOLDOWN = "cooling down"
    DONE = "done"


@dataclass
class Change:
    """One change the tuner tried, and what became of it (times on the tuner's clock)."""

    change: str
    rule: str
    canary: str
    peers: list[str]
    predicted_gain: float  # a server's, from the planner (a kept change goes to every server)
    started_at: float
    dry_run: bool = False
    measured: Measurement | None = None
    outcome: str | None = None  # kept, rolled back, failed, would apply
    canary_up_at: float | None = None
    decided_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


class Background:
    """One blocking call on a worker thread; :meth:`poll` says when it is over and how."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self.error: BaseException | None = None
        self._done = threading.Event()

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by poll(): a failed re-flag is an outcome, not a crash
                self.error = exc
            finally:
                self._done.set()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)
