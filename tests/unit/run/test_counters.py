"""A run counter is one row of the metric table: the tracker, the event log, ``tokenmill status``, the summary and the
exporter all read it from there, and no other module names the table's counters by hand."""

from __future__ import annotations

import ast
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from tests.helpers.dispatch import prompts
from tests.helpers.watch import dispatcher, job
from tokenmill.monitor.combine import merge_ticks
from tokenmill.monitor.dashboard import render
from tokenmill.monitor.events import EVENTS_FILE, read_events
from tokenmill.monitor.lines import status_line
from tokenmill.monitor.page import Timeline, page_state
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.report.status import read_status, status_text
from tokenmill.run import metrics
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.progress import Tracker
from tokenmill.run.summary import Summary
from tokenmill.run.watch import RunMonitor

SRC = Path(__file__).resolve().parents[3] / "src" / "tokenmill"
# a counter the dispatcher keeps and nothing shows yet: the row a newcomer would add
NEW = metrics.counter(
    "tokenmill_requests_started", "Requests sent (attempts).", "started", summary="requests sent this run"
)


async def _watched_run(
    tmp_path: Path, n: int, then: Callable[[Dispatcher], None] = lambda _d: None, **scripted: Any
) -> tuple[Dispatcher, Snapshot, str]:
    """A watched run of ``n`` prompts into ``tmp_path/out``; ``then`` runs after it, before the tick. The
    dispatcher, the tick's snapshot and a scrape of /metrics."""
    spec = job(tmp_path, metrics_port=0, event_interval_s=0.001)
    out = tmp_path / "out"
    out.mkdir()
    d = dispatcher(spec, **scripted)
    mon = RunMonitor(spec, d, out, "run1")
    tracker = Tracker(d)
    await mon.start(total=n, done_before=0)
    try:
        assert await d.run(prompts(n))
        then(d)
        tracker.total = n
        snap = tracker.snapshot(mon.state())
        mon.tick(snap)
        assert mon.metrics_url is not None
        async with aiohttp.ClientSession() as session, session.get(mon.metrics_url) as resp:
            body = await resp.text()
    finally:
        await mon.stop(tracker.snapshot(mon.state()), finished=True)
    return d, snap, body


@pytest.fixture
def new_row(monkeypatch: pytest.MonkeyPatch) -> metrics.Metric:
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, NEW))
    return NEW


async def test_a_new_run_counter_is_one_row_of_the_table(tmp_path: Path, new_row: metrics.Metric) -> None:
    out = tmp_path / "out"
    d, snap, body = await _watched_run(tmp_path, 12, fail_every=5)
    sent = d.stats.started
    assert sent == 12 + d.stats.retries and d.stats.retries > 0
    assert snap.counts == {"started": sent}  # the tracker
    scraped = {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}
    assert scraped["tokenmill_requests_started_total"] == sent  # the exporter
    tick = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"][-1]
    assert tick["client"]["counts"] == {"started": sent}  # the event log
    back = Snapshot.from_event(tick)
    assert back.counts == {"started": sent}
    summary = Summary.from_snapshot(back, output_dir=str(out), model="m", api="chat", recorded=(12, 0),
                                    state="finished")  # fmt: skip
    assert f"| requests sent this run | {sent:,} |" in summary.markdown()  # the summary
    assert f"| requests sent this run | {sent:,} |" in status_text(read_status(out))  # tokenmill status
    shown = f"started {sent:,}"
    assert shown in status_line(snap) and shown in _rendered(snap)  # the status line and the dashboard
    assert page_state(snap, Timeline(), title="t", state="running")["failures"]["counts"] == shown  # the live page
    merged = merge_ticks([tick, tick])  # two partitions' ticks: their counters add up
    assert Snapshot.from_event(merged).counts == {"started": 2 * sent}


# a counter the dispatcher does not keep yet either: the row, and ``stats.count`` where it happens
FRESH = metrics.counter("tokenmill_fresh_events", "Events nobody counted before.", "fresh", summary="fresh events")


async def test_a_counter_without_a_field_is_the_row_and_the_count_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, FRESH))
    out = tmp_path / "out"

    def counted(d: Dispatcher) -> None:
        assert not hasattr(d.stats, "fresh")  # DispatchStats has no field for it
        d.stats.count("fresh")
        d.stats.count("fresh", 2)

    _, snap, body = await _watched_run(tmp_path, 4, then=counted)
    assert snap.counts == {"fresh": 3}
    scraped = {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}
    assert scraped["tokenmill_fresh_events_total"] == 3
    tick = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"][-1]
    assert tick["client"]["counts"] == {"fresh": 3}
    summary = Summary.from_snapshot(Snapshot.from_event(tick), output_dir=str(out), model="m", api="chat",
                                    recorded=(4, 0), state="finished")  # fmt: skip
    assert "| fresh events | 3 |" in summary.markdown()
    assert tick["client"]["retries"] == 0 and isinstance(tick["client"]["retries"], int)  # fields keep their type


def _rendered(snap: Snapshot) -> str:
    console = Console(file=io.StringIO(), width=300)
    console.print(render(snap))
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def test_without_the_row_nothing_shows_it() -> None:
    """The same counter with no row: no count, no summary row (the summary's text is as before)."""
    snap = Snapshot.from_event({"client": {"counts": {"started": 3, "bogus": "x"}}})
    assert snap.counts == {"started": 3.0}
    text = Summary.from_snapshot(snap, output_dir="o", model="m", api="a", recorded=(0, 0), state="finished")
    assert "requests sent" not in text.markdown() and text.counts == {}
    bare = Snapshot.from_event({"client": {"retries": 2}})
    assert "counts" not in bare.to_event()["client"]  # a tick without a new counter is written as before
    assert "retries 2 | servers" in status_line(bare) and "retries 2  elapsed" in _rendered(bare)


def test_every_run_counter_of_the_table_reaches_the_snapshot_and_the_tick() -> None:
    """Every row with a stat lands in a snapshot field of its tick name, or in counts (and so in the tick)."""
    own = set(Snapshot.__dataclass_fields__)
    for m in metrics.rows():
        if m.stat is None:
            continue
        assert m.kind == "counter" and m.tick is not None, m.name
        assert m.tick in own or m.summary, f"{m.name}: neither a snapshot field nor a summary row"


def _named_counters(path: Path, stats: set[str]) -> list[str]:
    """Reads of a dispatcher counter the table owns (``stats.X`` / ``st.X``) in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr in stats and isinstance(node.ctx, ast.Load)):
            continue
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
        if name in ("stats", "st"):
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: {name}.{node.attr}")
    return found


def test_no_module_but_the_table_reads_the_table_s_counters_by_hand() -> None:
    """The dispatcher keeps its counters (run/dispatch.py, run/work.py, run/abandon.py count them); the table reads
    them for every view. Two reads compute with ``failed`` instead of showing it: the tracker's count of prompts done
    (completed + failed, and its rate) and the run's exit status."""
    stats = {m.stat for m in metrics.rows() if m.stat}
    owners = {"run/metrics.py", "run/dispatch.py", "run/work.py", "run/abandon.py", "run/servers.py"}
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if str(path.relative_to(SRC)) not in owners
        for hit in _named_counters(path, stats)
    ]
    assert {h.split(":")[0] for h in found} <= {"run/progress.py", "run/runner.py"}, found
    assert all(h.endswith(".failed") for h in found) and len(found) <= 3, found
