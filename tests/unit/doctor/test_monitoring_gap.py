"""A server whose /metrics scrapes time out while its requests succeed is not down and not flapping: that is a
monitoring gap, said as such and binding nothing. A server that refuses its scrapes, or whose requests fail, still
is down or flapping. The timeouts come from a real HTTP server on loopback whose /metrics does not answer (it
waits on an event that is only set when the test lets it answer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tokenmill.config import DoctorSpec
from tokenmill.doctor import ClientSide, Observation, ServerObs, diagnose
from tokenmill.monitor.fleet import FleetMonitor
from tokenmill.monitor.scrape import ServerSnapshot, parse_metrics
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.run.summary import Summary

METRICS = (Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.23" / "metrics-dense.txt").read_text()
URL = "http://10.0.0.7:30000"


class SlowMetrics:
    """/metrics answers only while ``answer`` is set; otherwise it never answers (the scrape times out)."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.answer.set()

    async def metrics(self, request: web.Request) -> web.Response:
        await self.answer.wait()
        return web.Response(text=METRICS, content_type="text/plain")


@pytest.fixture
async def slow() -> AsyncIterator[tuple[str, SlowMetrics]]:
    server = SlowMetrics()
    app = web.Application()
    app.router.add_get("/metrics", server.metrics)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.answer.set()
        await runner.cleanup()


async def test_scrapes_that_time_out_are_a_gap_not_ups_and_downs(slow: tuple[str, SlowMetrics]) -> None:
    url, server = slow
    clock = iter(range(0, 1000, 5)).__next__  # every scrape 5 s after the last, whatever the machine does
    fleet = FleetMonitor([url], timeout_s=1.0, clock=lambda: float(clock()))
    async with fleet.session() as session:
        for answers in (True, False, True, False, True, False, False, False):
            if answers:
                server.answer.set()
            else:
                server.answer.clear()
            await fleet.poll_once(session)
    view = fleet.views[0]
    assert view.transitions == 0  # three gaps, no up/down change
    assert not view.healthy and view.missed_scrapes == 3 and view.gap_s == 10.0
    assert view.snapshot is not None and view.snapshot.running is not None  # the last good numbers stay
    side = ClientSide(inflight=40, limit=48, errors=0, completed_age_s=1.0)
    found = {v.rule: v for v in diagnose(Observation((ServerObs(view, side),)), DoctorSpec())}
    assert "server-down" not in found and "flapping" not in found
    gap = found["monitoring-gap"]
    assert gap.binds == "" and gap.title == "monitoring gap"
    assert "3 /metrics scrapes in a row timed out over 10s, while its requests succeed" in gap.summary
    assert "a monitoring gap, the server works" in gap.summary
    assert "monitor.scrape_timeout_s" in gap.advice


def _ingest(steps: list[str]) -> FleetMonitor:
    """``ok`` a good scrape, ``slow`` one that timed out, ``refused`` a refused connection; 5 s apart."""
    fleet = FleetMonitor([URL], flap_window_s=600.0)
    for i, step in enumerate(steps):
        t = 5.0 * i
        if step == "ok":
            snap = parse_metrics(METRICS, t)
        else:
            snap = ServerSnapshot("unknown", t, False, error=f"{step}", timed_out=step == "slow")
        fleet.ingest(URL, snap)
    return fleet


def test_a_server_that_refuses_its_scrapes_and_fails_requests_is_still_down_and_flapping() -> None:
    view = _ingest(["ok", "refused", "ok", "refused", "ok", "refused", "refused", "refused"]).views[0]
    assert view.transitions == 5 and view.missed_scrapes == 0
    side = ClientSide(inflight=0, limit=48, errors=7, completed_age_s=60.0)
    found = {v.rule for v in diagnose(Observation((ServerObs(view, side),)), DoctorSpec())}
    assert {"server-down", "flapping"} <= found and "monitoring-gap" not in found


def test_a_server_whose_scrapes_time_out_and_whose_requests_stopped_is_down() -> None:
    view = _ingest(["ok", "slow", "slow", "slow", "slow"]).views[0]
    side = ClientSide(inflight=40, limit=48, errors=0, completed_age_s=30.0)  # nothing completed during the gap
    found = {v.rule for v in diagnose(Observation((ServerObs(view, side),)), DoctorSpec())}
    assert "server-down" in found and "monitoring-gap" not in found


def test_no_server_with_no_failed_request_is_flapping() -> None:
    view = _ingest(["ok", "refused", "ok", "refused", "ok"]).views[0]
    assert view.transitions == 4
    quiet = {v.rule for v in diagnose(Observation((ServerObs(view, ClientSide(errors=0)),)), DoctorSpec())}
    assert "flapping" not in quiet
    failing = {v.rule for v in diagnose(Observation((ServerObs(view, ClientSide(errors=3)),)), DoctorSpec())}
    assert "flapping" in failing
    unknown = {v.rule for v in diagnose(Observation((ServerObs(view, ClientSide()),)), DoctorSpec())}
    assert "flapping" in unknown  # `tokenmill doctor` alone does not know the client's requests


def test_the_summary_of_a_run_with_scrape_gaps_names_no_server_availability() -> None:
    view = _ingest(["ok", "slow", "ok", "slow", "ok", "slow", "slow", "slow"]).views[0]
    side = ClientSide(inflight=40, limit=48, errors=0, completed_age_s=1.0)
    verdicts = diagnose(Observation((ServerObs(view, side),)), DoctorSpec())
    assert [v.rule for v in verdicts] == ["monitoring-gap"]
    row = ServerRow(URL, 40, 48, 500, 0, 900.0, True, None, healthy=False)
    snap = Snapshot(600.0, 500, 500, 500, 0, 0, 0, 0, 0.8, 900.0, None, [row], False, None, verdicts=tuple(verdicts))
    md = Summary.from_snapshot(snap, output_dir="out", model="m", api="openai-chat", recorded=(500, 0),
                               state="finished").markdown()  # fmt: skip
    assert "server flapping" not in md and "server down" not in md and "server availability" not in md
    assert "monitoring gap" in md  # the doctor's line says what it was
