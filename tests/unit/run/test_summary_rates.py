"""The summary's "decode rate vs the hardware" is the run's share (the last window's was beside an average that
worked out to another), and a time-scaled twin's rates are labelled so in the summary, `tokenmill status`, the
report, the status line, the dashboard and the live page."""

from __future__ import annotations

from dataclasses import asdict
from html import escape
from pathlib import Path

from rich.console import Console

from tokenmill.monitor.dashboard import render
from tokenmill.monitor.lines import status_line, time_scale_text
from tokenmill.monitor.page import Timeline, page_html, page_state
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.report.data import RunData
from tokenmill.report.html import _servers, summary_rows
from tokenmill.run.summary import Summary

SCALED = "time-scaled: twins at time scale 0.02 run at 50x the GPU's rates"


def row(url: str, last: float, over_run: float, scale: float | None = None) -> ServerRow:
    """A server whose last window decoded ``last`` tok/s and the whole run ``over_run`` on average."""
    r = ServerRow(url, 8, 8, 10, 0, client_tok_s=1.0, usable=True, problem=None, healthy=True, decode_tok_s=last)
    r.expected_tok_s, r.ceiling_tok_s, r.gpu = 1000.0, 2000.0, "rtx-pro-6000"
    r.decoded_tokens, r.time_scale = over_run * 3600.0, scale
    return r


def snap(*rows: ServerRow) -> Snapshot:
    return Snapshot(
        elapsed_s=3600.0, done=20, total=100, completed=20, failed=0, skipped=0, retries=0, inflight=16,
        comp_s=1.0, client_tok_s=900.0, eta_s=80.0, servers=list(rows), waiting=False, last_failure=None,
        decode_tok_s=sum(r.decode_tok_s or 0.0 for r in rows), client_tokens=20 * 2700,
    )  # fmt: skip


def summary(s: Snapshot) -> Summary:
    return Summary.from_snapshot(s, output_dir="out", model="m", api="chat", recorded=(20, 0), state="finished")


def test_the_summary_s_share_of_expected_is_over_the_run_not_the_last_window() -> None:
    """The last window (the run's tail) decoded 40 tok/s against 1,000 expected; the run averaged 470."""
    text = summary(snap(row("a", 40.0, 470.0))).markdown()
    assert "| decode rate vs the hardware | 47% of expected (rtx-pro-6000) over the run, 24% of the roofline |" in text
    assert "4% of expected" not in text
    assert "| decode tok/s per GPU | 470 |" in text  # the rate beside it is the run's too


def test_time_scaled_rates_are_labelled_in_the_summary_status_report_and_dashboard(tmp_path: Path) -> None:
    s = snap(row("a", 500.0, 470.0, scale=0.02), row("b", 500.0, 470.0, scale=0.02))
    assert time_scale_text(s) == SCALED
    text = summary(s).markdown()  # what `tokenmill status` prints after its state line, and summary.md
    assert f"| decode tok/s (servers, aggregate) | 940 ({SCALED}) |" in text
    assert f"| output tok/s (client-effective) | 15 ({SCALED}) |" in text
    assert f"[{SCALED}]" in status_line(s)
    report = dict(summary_rows(RunData(tmp_path, summary=asdict(summary(s)), last_tick=s.to_event())))
    assert report["decode tok/s per GPU"] == escape(f"470 ({SCALED})")  # the page is HTML
    assert "(x50, time-scaled)" in _servers(RunData(tmp_path, last_tick=s.to_event()))
    assert SCALED in render_text(s)
    assert page_state(s, Timeline(), title="m -> out", state="running")["progress"]["time_scale"] == SCALED
    assert "esc(p.time_scale)" in page_html()  # the live page shows it beside the rates
    assert time_scale_text(snap(row("a", 500.0, 470.0))) == ""  # a real server's rates are the GPU's own
    assert "time-scaled" not in summary(snap(row("a", 500.0, 470.0))).markdown()


def render_text(s: Snapshot) -> str:
    console = Console(width=300, record=True)
    console.print(render(s))
    return console.export_text()
