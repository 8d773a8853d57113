"""The adaptive concurrency rules, one case each, on observations as the monitor reports them."""

from __future__ import annotations

from typing import Any

from tokenmill.config import ControlSpec
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.scrape import ServerSnapshot
from tokenmill.run.control import ConcurrencyController, Observation, next_target, queue_for
from tokenmill.run.servers import ServerState

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


def test_a_server_held_at_what_it_runs_stays_pool_bound() -> None:
    # at running + queue the server keeps that queue waiting: still pool-bound, no flip back to the cap
    target, why = next_target(24, obs(max_running=128, running=20, queued=4), SPEC)
    assert target == 24 and "pool-bound" in why
    # its pool frees up: it admits the queue, the queue is gone, the target returns to the cap
    target, why = next_target(24, obs(max_running=128, running=24, queued=0), SPEC)
    assert target == 128 + queue_for(128, SPEC) and "cap" in why


# ---- the controller over monitor rounds --------------------------------------------------------------


def view(url: str, **kw: Any) -> ServerView:
    base: dict[str, Any] = {"snapshot": None, "info": None, "healthy": True, "error": None}
    base.update(kw)
    return ServerView(url=url, **base)


class Rounds:
    """A stand-in for the fleet monitor: a round counter and the latest views."""

    def __init__(self) -> None:
        self.rounds = 0
        self.views: list[ServerView] = []

    def round(self, *views: ServerView) -> None:
        self.rounds += 1
        self.views = list(views)


def test_controller_starts_at_initial_and_follows_each_round_once() -> None:
    servers = [ServerState(url="http://a", limit=999), ServerState(url="http://b", limit=999)]
    ctl = ConcurrencyController(servers, SPEC)
    assert [s.limit for s in servers] == [SPEC.initial, SPEC.initial]
    mon = Rounds()
    mon.round(view("http://a", max_running=24, running=24.0, queued=30.0), view("http://b", healthy=False))
    ctl.follow(mon)  # type: ignore[arg-type]
    assert servers[0].limit == 28 and servers[0].limit_reason == "server cap 24"
    assert servers[1].limit == SPEC.initial  # not answering: left alone
    servers[0].throttled += 3  # three 429s, but no new round yet: nothing changes
    ctl.follow(mon)  # type: ignore[arg-type]
    assert servers[0].limit == 28 and ctl.rounds == 1
    mon.round(view("http://a", max_running=24, running=24.0, queued=4.0))
    ctl.follow(mon)  # type: ignore[arg-type]
    assert servers[0].limit == 19 and "429/503" in (servers[0].limit_reason or "")
    mon.round(view("http://a", max_running=24, running=19.0, queued=0.0))
    ctl.follow(mon)  # type: ignore[arg-type]
    assert servers[0].limit == 28  # no new throttling: back to the cap and its queue


def test_controller_steers_a_server_the_fleet_added_later() -> None:
    servers = [ServerState(url="http://a", limit=SPEC.initial)]
    ctl = ConcurrencyController(servers, SPEC)
    servers.append(ServerState(url="http://c", limit=SPEC.initial, throttled=5))  # what Dispatcher.add_server does
    ctl.update([view("http://c", max_running=100, running=50.0, queued=0.0)])
    assert servers[1].limit == 100 + queue_for(100, SPEC)  # its earlier 429s are not held against it


def snapshot(running: float, queued: float) -> ServerSnapshot:
    return ServerSnapshot(engine="sglang", taken_at=0.0, healthy=True, running=running, queued=queued)


def test_a_scrape_during_a_burst_does_not_shrink_the_target_below_the_recent_peak() -> None:
    servers = [ServerState(url="http://a", limit=SPEC.initial)]
    ctl = ConcurrencyController(servers, SPEC)
    # window means lag (an idle start pulls them down); the latest gauges count
    ctl.update([view("http://a", max_running=128, running=5.0, queued=1.0, snapshot=snapshot(50, 30))])
    assert servers[0].limit == 50 + queue_for(50, SPEC) and "pool-bound at 50" in (servers[0].limit_reason or "")
    # a burst still being prefilled: 12 running now, but it ran 50 a round ago
    ctl.update([view("http://a", max_running=128, running=30.0, queued=20.0, snapshot=snapshot(12, 40))])
    assert servers[0].limit == 50 + queue_for(50, SPEC)
