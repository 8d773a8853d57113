"""The client side of monitoring: the dispatcher's observer hook, the event log, the exporter and status."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import recorded
from tests.helpers.dispatch import prompts
from tests.helpers.watch import VERDICT, dispatcher, job, write_out
from tokenmill.config import JobSpec
from tokenmill.histogram import Histogram
from tokenmill.monitor.client import ClientMetrics
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog, last_events, read_events
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import parse_server_info
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.report.status import read_status, recorded_counts, status_text
from tokenmill.run.progress import Tracker
from tokenmill.run.watch import RunMonitor


async def test_the_observer_hook_feeds_client_metrics(tmp_path: Path) -> None:
    spec = job(tmp_path)
    d = dispatcher(spec, fail_every=4)
    metrics = ClientMetrics([s.url for s in d.servers])
    d.observer = metrics.observe
    assert await d.run(prompts(30))
    assert metrics.finish_reasons == {"stop": 30}
    assert metrics.output_len.count == 30 and metrics.avg_output_tokens == 5
    assert metrics.avg_prompt_tokens == 3
    assert metrics.errors == {"TransientError": d.stats.retries}
    assert metrics.latency["http://127.0.0.1:9"].count == 30 + d.stats.retries


async def test_a_broken_observer_is_dropped_and_dispatch_goes_on(tmp_path: Path) -> None:
    d = dispatcher(job(tmp_path))

    def broken(outcome: object) -> None:
        raise RuntimeError("observer bug")

    d.observer = broken
    assert await d.run(prompts(5))
    assert d.stats.completed == 5 and d.observer is None


def test_histogram_round_trip() -> None:
    h = Histogram((10, 100))
    for v in (5, 50, 50, 500):
        h.observe(v)
    assert h.cumulative() == [(10.0, 1), (100.0, 3), (float("inf"), 4)]
    again = Histogram.from_dict(orjson.loads(orjson.dumps(h.as_dict())))
    assert again.counts == h.counts and again.mean() == pytest.approx(151.25)


def test_event_log_reader_skips_a_torn_tail_and_finds_last_records(tmp_path: Path) -> None:
    path = tmp_path / EVENTS_FILE
    log = EventLog(path, "r1", wall=lambda: 1000.0)
    log.write("start", model="m")
    for i in range(3):
        log.write("tick", elapsed_s=float(i))
    log.close()
    with path.open("ab") as fh:
        fh.write(b'{"kind":"tick","t":')  # a crash mid-write
    kinds = [r["kind"] for r in read_events(path)]
    assert kinds == ["start", "tick", "tick", "tick"]
    last = last_events(path)
    assert last["tick"]["elapsed_s"] == 2.0 and last["start"]["model"] == "m" and "end" not in last


async def test_run_monitor_writes_ticks_and_serves_prometheus_metrics(tmp_path: Path) -> None:
    spec = job(tmp_path, metrics_port=0, event_interval_s=0.001)
    (tmp_path / "out").mkdir()
    d = dispatcher(spec)
    mon = RunMonitor(spec, d, tmp_path / "out", "run1")
    tracker = Tracker(d)
    await mon.start(total=20, done_before=0)
    try:
        assert await d.run(prompts(20))
        tracker.total = 20
        mon.tick(tracker.snapshot(mon.state()))
        assert mon.metrics_url is not None and mon.metrics_url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session, session.get(mon.metrics_url) as resp:
            body = await resp.text()
    finally:
        await mon.stop(tracker.snapshot(mon.state()), finished=True)
    samples = {
        s.name + str(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(body) for s in f.samples
    }
    server = "[('server', 'http://127.0.0.1:9')]"
    assert samples["tokenmill_completions_total" + server] == 20
    assert samples["tokenmill_output_tokens_total" + server] == 100
    assert samples["tokenmill_request_latency_seconds_count" + server] == 20
    assert samples["tokenmill_input_rows[]"] == 20 and samples["tokenmill_prompts_done[]"] == 20
    assert samples["tokenmill_finish_reasons_total[('reason', 'stop')]"] == 20
    records = list(read_events(tmp_path / "out" / EVENTS_FILE))
    assert records[0]["kind"] == "start" and records[0]["format"] == EVENT_FORMAT and records[-1]["kind"] == "end"
    tick = [r for r in records if r["kind"] == "tick"][-1]
    assert tick["client"]["completed"] == 20 and tick["client"]["finish_reasons"] == {"stop": 20}
    assert tick["servers"][0]["url"] == "http://127.0.0.1:9" and tick["servers"][0]["completed"] == 20
    assert tick["servers"][0]["inflight_avg"] is None  # the monitor was off: no window means
    snap = Snapshot.from_event(tick)
    assert (snap.completed, snap.client_tokens, snap.servers[0].client_tokens) == (20, 100, 100)


async def test_a_taken_metrics_port_is_a_warning_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = job(tmp_path, metrics_port=0)
    (tmp_path / "out").mkdir()
    first = RunMonitor(spec, dispatcher(spec), tmp_path / "out", "a")
    await first.start(None, 0)
    assert first.exporter is not None
    try:
        taken = job(tmp_path, metrics_port=first.exporter.port)
        second = RunMonitor(taken, dispatcher(taken), tmp_path / "out", "b")
        await second.start(None, 0)
        assert second.exporter is None and second.metrics_url is None
        assert "choose another monitor.metrics_port" in caplog.text and "goes on without" in caplog.text
        await second.stop(Tracker(second.dispatcher).snapshot(second.state()), finished=False)
    finally:
        assert first.exporter is not None
        await first.exporter.stop()


def test_status_of_a_run_in_progress(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_out(out, end=False, tick_age=2.0)
    assert recorded_counts(out) == (7, 1)
    st = read_status(out)
    assert st.state == "running"
    s = st.summary
    assert (s.completed_total, s.failed_total, s.total_rows) == (7, 1, 20)
    assert s.decode_tok_s == pytest.approx(100.0) and s.decode_tok_s_per_gpu == pytest.approx(50.0)
    assert s.binding == "state pool" and s.eta_s == 15.0
    assert (s.servers[0].client_tokens, s.servers[0].client_tok_s) == (700, 70.0)  # not 0: the tick carries them
    assert s.verdicts == [VERDICT["line"]]
    text = status_text(st)
    assert text.startswith("running (last update")
    assert "| binding resource | state pool (state-pool bound) |" in text and "| decode tok/s per GPU | 50 |" in text
    assert f"- {VERDICT['line']}" in text


def test_status_reads_a_log_of_the_previous_format(tmp_path: Path) -> None:
    write_out(tmp_path / "old", end=False, tick_age=2.0, v1=True)
    old = read_status(tmp_path / "old").summary
    assert (old.completed_this_run, old.client_tokens, old.total_rows) == (7, 700, 20)
    assert old.decode_tok_s == pytest.approx(100.0) and old.decode_tok_s_per_gpu == pytest.approx(50.0)
    assert old.binding == "state pool" and old.verdicts == ["state-pool-bound"]  # format 1 kept rule names only
    assert old.servers[0].client_tokens == 0  # format 1 did not record them per server


def test_status_finished_and_interrupted(tmp_path: Path) -> None:
    write_out(tmp_path / "a", end=True, tick_age=5.0)
    assert read_status(tmp_path / "a").state == "finished"
    write_out(tmp_path / "b", end=False, tick_age=3600.0)
    st = read_status(tmp_path / "b")
    assert st.state == "interrupted" and "rerun the same command" in status_text(st)


def test_status_of_something_else_says_so(tmp_path: Path) -> None:
    from tokenmill.errors import OutputError

    with pytest.raises(OutputError, match="not a tokenmill output directory"):
        read_status(tmp_path)


async def test_the_run_binding_is_the_verdict_shown_longest(tmp_path: Path) -> None:
    from tests.helpers.doctor import observe

    spec = job(tmp_path, doctor={"confirm_rounds": 1})
    (tmp_path / "out").mkdir()
    now = {"t": 0.0}
    mon = RunMonitor(spec, dispatcher(spec), tmp_path / "out", "r", clock=lambda: now["t"])
    state_bound = [s.view for s in observe("state_bound_no_buffer").servers]
    kv_bound = [s.view for s in observe("kv_bound").servers]
    for views, seconds in ((state_bound, 30), (kv_bound, 5)):
        for _ in range(seconds // 5):
            await mon._round([replace(v, url="http://127.0.0.1:9") for v in views])
            now["t"] += 5.0
    assert [v.rule for v in mon.doctor.shown] == ["kv-bound"]  # what binds now
    assert mon.binding == "state pool"  # what bound for most of the run
    mon.events.close()


def test_a_seeded_job_is_warned_once_per_server_that_ignores_seeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SGLang uses request seeds only with --enable-deterministic-inference (a real 0.5.23 server gave two
    different answers to one seed): a job with sampling.seed is told which servers ignore it."""
    spec = JobSpec.model_validate({**job(tmp_path).model_dump(), "sampling": {"seed": 7}})
    mon = RunMonitor(spec, dispatcher(spec), tmp_path / "out", "r")
    real = parse_server_info(recorded.server_info("dense"))
    assert real.deterministic is False
    view = ServerView("http://127.0.0.1:9", None, real, True, None)
    deterministic = replace(view, url="http://127.0.0.1:10", info=replace(real, deterministic=True))
    for _ in range(2):
        mon._warn_ignored_seed([view, deterministic])
    warned = [r.getMessage() for r in caplog.records if "ignores sampling.seed" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("http://127.0.0.1:9 ")
