"""Autotune for tests: a scripted fleet that answers each trial, and a driver that runs the tuner over it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tokenmill.autotune.actuators import refusal
from tokenmill.autotune.loop import Autotuner
from tokenmill.config import AutotuneSpec
from tokenmill.doctor.model import MemoryRisk, PlanPoint, Prediction, Verdict
from tokenmill.monitor.fleet import ServerView

RADIX_OFF = "--disable-radix-cache --max-running-requests 96"


SERVERS = ["http://s0", "http://s1", "http://s2"]


def verdict(
    change: str = RADIX_OFF,
    gain: float = 1.5,
    servers: Sequence[str] = SERVERS,
    note: str | None = None,
    memory: MemoryRisk | None = None,
) -> Verdict:
    pred = Prediction(
        change, PlanPoint(15, 300.0), PlanPoint(96, 300.0 * (1 + gain)), "planner", note=note, memory=memory
    )
    share = len(servers) / len(SERVERS)
    return Verdict(
        "state-pool-bound", "state pool", "state-pool bound", "warning", tuple(servers), len(SERVERS), "s", (), "a",
        changes=(change,), predictions=(pred,), caveats=("",), kinds=("server",), impact=gain * share,
    )  # fmt: skip


@dataclass
class ScriptedFleet:
    """Servers decoding ``base`` tok/s, times ``factor`` while they run the change (and ``drift(t)`` for all);
    the actuator's calls are recorded and take effect at once."""

    factor: float = 2.5
    base: float = 100.0
    drift: Callable[[float], float] = lambda t: 1.0
    noise: float = 0.02
    allow: Sequence[str] = ("disable-radix-cache", "max-running-requests")
    calls: list[tuple[str, str, list[str]]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    tokens: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SERVERS, 0.0))
    t: float = 0.0
    n: int = 0

    def servers(self) -> list[str]:
        return list(SERVERS)

    def refuse(self, change: str) -> str | None:
        return refusal(change, self.allow)

    def apply(self, change: str, urls: Sequence[str], say: Callable[[str], None]) -> None:
        self.calls.append(("apply", change, list(urls)))
        self.changed |= set(urls)
        say(f"re-flagged {len(urls)}")

    def revert(self, urls: Sequence[str], say: Callable[[str], None]) -> None:
        self.calls.append(("revert", "", list(urls)))
        self.changed -= set(urls)

    def clock(self) -> float:
        return self.t

    def views(self) -> list[ServerView]:
        """One second on: each server decodes at its rate (a deterministic wobble of +-noise)."""
        self.t += 1.0
        self.n += 1
        out = []
        for i, url in enumerate(SERVERS):
            wobble = 1 + self.noise * math.sin(1.7 * self.n + i)
            rate = self.base * (self.factor if url in self.changed else 1.0) * self.drift(self.t) * wobble
            self.tokens[url] += rate
            out.append(
                ServerView(url, None, None, True, None, running=15.0, requests_s=0.5, decoded_tokens=self.tokens[url])
            )
        return out


def spec(**kw: object) -> AutotuneSpec:
    base: dict[str, object] = {
        "window_s": 20, "max_window_s": 60, "warmup_s": 3, "warmup_lifetimes": 0, "cooldown_s": 5,
        "max_changes": 1, "min_remaining_s": 0, "sub_windows": 5,
    }  # fmt: skip
    return AutotuneSpec.model_validate({**base, **kw})


def drive(fleet: ScriptedFleet, tuner: Autotuner, rounds: int, verdicts: Sequence[Verdict] | None = None) -> None:
    for _ in range(rounds):
        tuner.round(fleet.views(), [verdict()] if verdicts is None else verdicts)
        assert tuner.wait_idle(10)


def tuned(fleet: ScriptedFleet, **kw: object) -> tuple[Autotuner, list[dict[str, object]]]:
    events: list[dict[str, object]] = []
    tuner = Autotuner(spec(**kw), fleet, emit=events.append, clock=fleet.clock)
    return tuner, events
