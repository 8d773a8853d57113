"""The adaptive concurrency rules, one case each, on observations as the monitor reports them."""

from __future__ import annotations

from tokenmill.config import ControlSpec
from tokenmill.control import Observation, next_target, queue_for

SPEC = ControlSpec()


def obs(**kw: object) -> Observation:
    base: dict[str, object] = {
        "max_running": None,
        "running": None,
        "queued": None,
        "preempting": False,
        "throttled": 0,
        "client_full": False,
    }
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_known_cap_gives_cap_plus_small_queue() -> None:
    target, why = next_target(64, obs(max_running=256, running=250, queued=2), SPEC)
    assert target == 256 + queue_for(256, SPEC) == 256 + 13
    assert "cap 256" in why


def test_pool_bound_admission_targets_what_it_runs() -> None:
    # state pool binds: 20 running of a 128 cap, a standing queue
    target, why = next_target(140, obs(max_running=128, running=20.2, queued=40), SPEC)
    assert target == 20 + SPEC.queue_min
    assert "pool-bound" in why


def test_retractions_shrink_to_what_it_runs() -> None:
    target, why = next_target(300, obs(max_running=256, running=180, queued=0, preempting=True), SPEC)
    assert target == 180 + queue_for(180, SPEC)
    assert "retract" in why


def test_throttling_backs_off_multiplicatively() -> None:
    target, why = next_target(100, obs(max_running=256, running=100, queued=0, throttled=3), SPEC)
    assert target == 70 and "429/503" in why


def test_vllm_without_cap_grows_while_client_limited_and_settles_on_a_queue() -> None:
    t1, why = next_target(64, obs(running=64, queued=0, client_full=True), SPEC)
    assert t1 == 80 and "growing" in why
    t2, _ = next_target(t1, obs(running=64, queued=0, client_full=False), SPEC)
    assert t2 == t1  # not client-limited, no queue: steady
    t3, why = next_target(400, obs(running=300, queued=90), SPEC)
    assert t3 == 300 + queue_for(300, SPEC) and "queue" in why


def test_no_metrics_keeps_initial_and_recovers_after_throttle() -> None:
    assert next_target(SPEC.initial, obs(), SPEC) == (SPEC.initial, "no metrics")
    t, _ = next_target(10, obs(), SPEC)
    assert 10 < t <= SPEC.initial


def test_bounds_hold() -> None:
    spec = ControlSpec(min=8, max=100)
    assert next_target(10, obs(max_running=4096, running=4000, queued=0), spec)[0] == 100
    assert next_target(9, obs(throttled=1), spec)[0] == 8
