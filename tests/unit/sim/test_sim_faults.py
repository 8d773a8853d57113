"""Fault draws: seeded, exclusive, at their rates, replaceable at run time."""

from __future__ import annotations

import pytest

from tokenmill.config import FaultSpec
from tokenmill.errors import ConfigError
from tokenmill.sim.faults import FAULT_KINDS, FaultInjector


def test_no_rates_means_no_faults() -> None:
    inj = FaultInjector(FaultSpec())
    assert {inj.draw() for _ in range(1000)} == {None}
    assert set(inj.counts.values()) == {0}


def test_each_kind_occurs_at_its_rate() -> None:
    spec = FaultSpec(error_rate=0.1, rate_limit_rate=0.2, stall_rate=0.05, drop_rate=0.15, malformed_rate=0.1)
    inj = FaultInjector(spec)
    n = 20_000
    for _ in range(n):
        inj.draw()
    expected = {"error": 0.1, "rate_limit": 0.2, "stall": 0.05, "drop": 0.15, "malformed": 0.1}
    for kind in FAULT_KINDS:
        assert inj.counts[kind] / n == pytest.approx(expected[kind], abs=0.015)


def test_draws_repeat_for_the_same_seed_and_update_reseeds() -> None:
    spec = FaultSpec(error_rate=0.5, seed=3)
    a = FaultInjector(spec)
    first = [a.draw() for _ in range(50)]
    b = FaultInjector(spec)
    assert [b.draw() for _ in range(50)] == first
    a.update(spec)
    assert [a.draw() for _ in range(50)] == first
    assert a.counts["error"] == 2 * first.count("error")


def test_rates_over_one_are_refused_with_a_fix() -> None:
    with pytest.raises(ConfigError, match="must not exceed 1"):
        FaultInjector(FaultSpec(error_rate=0.6, drop_rate=0.6))


def test_certain_fault_always_hits() -> None:
    inj = FaultInjector(FaultSpec(drop_rate=1.0))
    assert {inj.draw() for _ in range(100)} == {"drop"}
