"""The run's ETA: planned from the planner's capacity at each server's fitted eta while the measured completion
rate does not yet speak for the fleet (early in the run, after the usable servers changed), measured otherwise.
Times come from an injected clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, prompts, retry
from tests.helpers.watch import dispatcher, job
from tokenmill.run.eta import MEASURED, PLANNED, EtaRule, in_flight_s
from tokenmill.run.progress import Tracker
from tokenmill.run.watch import RunMonitor

A, B = "http://a", "http://b"
BOTH = frozenset({A, B})
WINDOW = 30.0


def test_early_in_the_run_the_eta_is_planned_then_measured_once_a_window_has_passed() -> None:
    rule = EtaRule(WINDOW, started=100.0)
    planned = {A: 300.0, B: 100.0}  # output tok/s at each server's fitted eta
    early = rule.estimate(110.0, remaining=1000, comp_s=2.0, usable=BOTH, planned_tok_s=planned, mean_output=200.0)
    assert early.source == PLANNED and early.seconds == pytest.approx(1000 * 200.0 / 400.0)
    later = rule.estimate(131.0, remaining=1000, comp_s=2.0, usable=BOTH, planned_tok_s=planned, mean_output=200.0)
    assert later.source == MEASURED and later.seconds == pytest.approx(500.0)


def test_a_change_of_the_usable_servers_makes_the_eta_planned_for_a_window() -> None:
    rule = EtaRule(WINDOW, started=0.0)
    planned = {A: 300.0, B: 100.0}
    assert rule.estimate(50.0, 1000, 2.0, BOTH, planned, 200.0).source == MEASURED
    one = frozenset({A})  # b set aside: the window's rate still counts it
    after = rule.estimate(60.0, 1000, 2.0, one, planned, 200.0)
    assert after.source == PLANNED and after.seconds == pytest.approx(1000 * 200.0 / 300.0)
    assert rule.estimate(89.0, 1000, 2.0, one, planned, 200.0).source == PLANNED
    assert rule.estimate(90.0, 1000, 2.0, one, planned, 200.0).source == MEASURED


def test_without_a_fitted_eta_for_every_usable_server_the_eta_is_measured() -> None:
    rule = EtaRule(WINDOW, started=0.0)
    eta = rule.estimate(5.0, 1000, 2.0, BOTH, {A: 300.0}, 200.0)
    assert eta.source == MEASURED and eta.seconds == pytest.approx(500.0)
    assert rule.estimate(6.0, 1000, 0.0, BOTH, {A: 300.0}, 200.0).seconds is None  # nothing to go by
    nothing_done = rule.estimate(7.0, 1000, 0.0, BOTH, {A: 300.0, B: 100.0}, 200.0)
    assert nothing_done.source == PLANNED  # no completion in the window yet: the plan is all there is
    assert rule.estimate(8.0, 1000, 2.0, BOTH, {A: 300.0, B: 100.0}, None).source == MEASURED  # no answer's length


async def test_the_tracker_s_eta_uses_the_monitor_s_planned_rates_on_its_clock(tmp_path: Path) -> None:
    now = [0.0]
    spec = job(tmp_path)
    d = dispatcher(spec)
    mon = RunMonitor(spec, d, tmp_path / "out", "run1", clock=lambda: now[0])
    tracker = Tracker(d, clock=lambda: now[0])
    tracker.total = 1000
    tracker.snapshot(mon.state())
    assert await d.run(prompts(20))  # 20 answers of 5 tokens each
    (url,) = [s.url for s in d.servers]
    mon.planned = {url: 1.0}  # what a round plans at the server's fitted eta
    now[0] = 10.0
    early = tracker.snapshot(mon.state())
    assert early.comp_s == pytest.approx(2.0)
    assert early.eta_s == pytest.approx(980 * 5 / 1.0)  # planned: the window is not yet a window of this fleet
    d.stats.completed += 60
    now[0] = 40.0
    later = tracker.snapshot(mon.state())
    assert later.eta_s == pytest.approx(920 / 2.0)  # measured: 60 prompts done in the last 30 s


async def test_the_eta_counts_the_requests_in_flight(tmp_path: Path) -> None:
    """The end of a run: 20 answers of 30 s each came back in the window, and the last 10 prompts were sent 2 s
    ago. Their rate says 13.5 s; they need the 28 s left of a request's latency."""
    now = [0.0]
    spec = job(tmp_path)
    backend = ScriptedBackend(lambda *_: None)
    backend.gate = asyncio.Event()
    d = factories.dispatcher(spec.servers, backend, Sink(), retry(), 10, clock=lambda: now[0])
    tracker = Tracker(d, clock=lambda: now[0])
    tracker.total = 30
    tracker.snapshot()
    (server,) = d.servers
    server.completed, server.latency_s = 20, 20 * 30.0  # 20 answers of 30 s each
    d.stats.completed = 20
    now[0] = 25.0
    task = asyncio.create_task(d.run(prompts(10)))
    for _ in range(1000):
        if d.inflight == 10:
            break
        await asyncio.sleep(0)
    assert d.inflight == 10
    tracker.snapshot()  # the 10 were sent at 25 s
    now[0] = 27.0
    snap = tracker.snapshot()
    assert snap.comp_s == pytest.approx(20 / 27.0)
    assert snap.eta_s == pytest.approx(28.0)  # not 10 / (20 / 27) = 13.5 s
    backend.gate.set()
    assert await task
    assert in_flight_s(30, 10, 1.0, 30.0, 5.0) == pytest.approx(20 / 1.0 + 30.0)  # 20 to send, then one latency
