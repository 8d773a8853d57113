"""The live dashboard and the status line, rendered from hand-made snapshots."""

from __future__ import annotations

import pytest
from rich.console import Console

from tokenmill.doctor import Verdict
from tokenmill.monitor.dashboard import render
from tokenmill.monitor.lines import status_line
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.monitor.stats import CpuMeter, GaugeWindow, Window, sparkline


def snap(**kw: object) -> Snapshot:
    rows = [
        ServerRow(
            "http://a:1", 64, 64, 100, 0, client_tok_s=900.0, usable=True, problem=None, client_tokens=30_000,
            healthy=True, running=131.0, max_running=131, queued=60.0, kv_usage=0.31, state_usage=0.99,
            decode_tok_s=3100.0, prompt_tok_s=800.0, gpus=2,
        ),
        ServerRow(
            "http://b:1", 0, 64, 50, 7, client_tok_s=0.0, usable=False, problem="5 failures in a row", healthy=False
        ),
    ]  # fmt: skip
    base: dict[str, object] = {
        "elapsed_s": 125.0,
        "done": 150,
        "total": 1000,
        "completed": 148,
        "failed": 2,
        "skipped": 0,
        "retries": 9,
        "inflight": 64,
        "comp_s": 3.5,
        "client_tok_s": 2900.0,
        "eta_s": 243.0,
        "servers": rows,
        "waiting": False,
        "last_failure": "http://b:1: connection refused",
        "decode_tok_s": 3100.0,
        "history": (0.0, 1000.0, 2000.0, 3100.0),
        "limit": 128,
    }
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def text_of(s: Snapshot) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(render(s))
    return console.export_text()


def test_dashboard_shows_rows_totals_throughput_and_history() -> None:
    out = text_of(snap())
    assert "150/1,000 done" in out and "3.5 compl/s" in out
    assert "client 2,900 tok/s" in out and "servers decode 3,100 tok/s" in out
    assert "ETA 4m03s" in out and "failed 2" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("http://a:1"))
    for cell in ("3,100", "131/131", "60", "31%", "99%", "64/64", "ok"):
        assert cell in row
    down = next(line for line in out.splitlines() if line.strip().startswith("http://b:1"))
    assert "set aside: 5 failures in a row" in down
    assert "fleet (2 servers, 3 GPUs)" in out and "1/2 ok" in out
    assert any(line.startswith("throughput " + sparkline((0.0, 1000.0, 2000.0, 3100.0))) for line in out.splitlines())
    assert "last error: http://b:1: connection refused" in out


def test_dashboard_and_status_line_show_the_doctor() -> None:
    v = Verdict(
        "state-pool-bound", "state pool", "state-pool bound", "warning", ("http://a:1",), 2,
        "running 131/131 with 60 queued", (), "advice", ("--disable-radix-cache --max-running-requests 380",),
    )  # fmt: skip
    s = snap(verdicts=(v,))
    assert "doctor: state-pool bound (http://a:1): running 131/131 with 60 queued -> --disable-radix-cache" in text_of(
        s
    )
    line = status_line(s)
    assert "(servers decode 3,100)" in line and line.endswith("doctor: state-pool bound (http://a:1)")


def test_dashboard_status_line_and_event_log_show_what_autotune_does() -> None:
    doing = (
        "autotune: measuring --disable-radix-cache --max-running-requests 96 on http://a:1 (predicted +150%), 20s to go"
    )
    s = snap(autotune=doing)
    assert doing in text_of(s)
    assert status_line(s).endswith(f"| {doing}")
    assert Snapshot.from_event(s.to_event()).autotune == doing
    assert "autotune" not in text_of(snap())


def test_sparkline_scales_to_the_largest_value() -> None:
    assert sparkline([0, 5, 10]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([]) == ""


def test_windows() -> None:
    w = Window(span_s=10)
    for t, v in ((0, 0.0), (5, 50.0), (10, 100.0), (15, 150.0)):
        w.add(t, v)
    assert w.rate() == 10.0
    w.add(16, 3)  # the counter restarted: no negative rate
    assert w.rate_or_none() is None and w.rate() == 0.0
    g = GaugeWindow(span_s=10)
    for t, v in ((0, 1.0), (5, 3.0), (12, 5.0)):
        g.add(t, v)
    assert g.mean() == 4.0 and g.max() == 5.0 and g.min() == 3.0
    g.add(16, None)  # no value, but time moves on: the sample at 5 s leaves the window
    assert g.mean() == 5.0


def test_cpu_meter_is_cpu_time_over_wall_time() -> None:
    now = {"wall": 0.0, "cpu": 0.0}
    meter = CpuMeter(clock=lambda: now["wall"], cpu=lambda: now["cpu"])
    now.update(wall=2.0, cpu=1.5)
    assert meter.sample() == 0.75


def test_log_records_go_through_the_live_console_while_the_dashboard_shows() -> None:
    import io
    import logging

    from rich.logging import RichHandler

    from tokenmill.run.progress import Display

    class Fixed:
        def snapshot(self, watch: object = None) -> Snapshot:
            return snap()

    own = Console(file=io.StringIO())
    handler = RichHandler(console=own)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        display = Display(Fixed(), 10, live=True, console=Console(file=io.StringIO(), force_terminal=True))  # type: ignore[arg-type]
        display.start()
        assert handler.console is display.console
        display.stop()
        assert handler.console is own
    finally:
        root.removeHandler(handler)


def test_off_a_terminal_a_run_ends_with_its_status_line_however_short(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from tokenmill.run.progress import Display

    class Clocked:
        def __init__(self) -> None:
            self.elapsed = 0.0

        def snapshot(self, watch: object = None) -> Snapshot:
            return dataclasses.replace(snap(), elapsed_s=self.elapsed)

    tracker = Clocked()
    display = Display(tracker, 10, live=False)  # type: ignore[arg-type]
    display.start()
    display.tick()  # the first line, at 0 s
    tracker.elapsed = 0.4  # the run ends before the next interval
    display.stop()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "elapsed 0s" in lines[0], lines
    tracker.elapsed = 0.4
    display.stop()  # stopping again at the same moment prints nothing more
    assert capsys.readouterr().err == ""


def test_a_server_whose_scrapes_time_out_is_shown_as_a_monitoring_gap_and_counted_up() -> None:
    late = ServerRow(
        "http://c:1", 40, 48, 300, 0, client_tok_s=800.0, usable=True, problem=None, healthy=False, missed_scrapes=3
    )
    out = text_of(snap(servers=[late]))
    assert "metrics late (3 scrapes timed out)" in out and "metrics down" not in out
    assert "1/1 ok" in out  # counted up: its requests go on
