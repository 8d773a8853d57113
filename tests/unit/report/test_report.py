"""``tokenmill report`` from an event log: series, verdict spans, thinning, the page and its figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenmill.errors import OutputError
from tokenmill.histogram import Histogram
from tokenmill.monitor.client import OUTPUT_LEN_BUCKETS
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog
from tokenmill.monitor.snapshot import RecordedVerdict, ServerRow, Snapshot
from tokenmill.report import build_report, load
from tokenmill.report.html import summary_rows

URLS = ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000")


def _hist(i: int) -> Histogram:
    hist = Histogram(OUTPUT_LEN_BUCKETS)
    for n in range(i + 1):
        hist.observe(100 + (n * 37) % 900)
    return hist


def _verdict_shown(i: int) -> bool:
    return i > 20


def _tick(i: int, run_done: int) -> dict[str, Any]:
    """Tick ``i`` of a run as this version writes it: a snapshot's event, plus the client metrics."""
    rows = []
    for k, url in enumerate(URLS):
        running = min(131, 20 + 2 * i) if k < 2 else 40
        rows.append(
            ServerRow(
                url, 64, 64, 10 * i, i // 40, client_tok_s=19.0 * running, usable=True, problem=None,
                client_tokens=500 * i, healthy=k != 2 or i % 50 < 45, running=running, max_running=131,
                queued=60 if running == 131 else 0, kv_usage=round(0.2 + 0.1 * k, 3),
                state_usage=round(running / 131, 3) if k < 2 else None, decode_tok_s=20.0 * running, gpus=1,
                decoded_tokens=1000 * i,
            )
        )  # fmt: skip
    verdict = RecordedVerdict(
        "state-pool-bound", "state-pool bound", "state pool", "warning", "running 131/131", "2/3 servers", "..."
    )
    snap = Snapshot(
        elapsed_s=10.0 * i, done=run_done + 3 * i, total=2000, completed=3 * i, failed=i // 30, skipped=0,
        retries=i // 10, inflight=192, comp_s=3.0, client_tok_s=sum(r.client_tok_s for r in rows), eta_s=600.0,
        servers=rows, waiting=False, last_failure=None, decode_tok_s=sum(r.decode_tok_s or 0 for r in rows),
        prompt_tokens=300 * i, client_tokens=500 * i, limit=192, verdicts=(verdict,) if _verdict_shown(i) else (),
    )  # fmt: skip
    tick = snap.to_event()
    tick["client"].update(
        finish_reasons={"stop": 2 * i, "length": i}, errors={"TransientError": i // 10}, output_len=_hist(i).as_dict()
    )
    return tick


def _v1_tick(i: int, run_done: int) -> dict[str, Any]:
    """The same tick as the version before format 2 wrote it (its ``tick_record``, key for key)."""
    servers = []
    for k, url in enumerate(URLS):
        running = min(131, 20 + 2 * i) if k < 2 else 40
        servers.append(
            {
                "url": url,
                "usable": True,
                "healthy": k != 2 or i % 50 < 45,
                "running": running,
                "max_running": 131,
                "queued": 60 if running == 131 else 0,
                "kv": round(0.2 + 0.1 * k, 3),
                "state": round(running / 131, 3) if k < 2 else None,
                "tok_s": 20.0 * running,
                "client_tok_s": 19.0 * running,
                "prompt_tok_s": None,
                "inflight": 64,
                "inflight_avg": None,
                "limit": 64,
                "completed": 10 * i,
                "errors": i // 40,
                "gpus": 1,
                "output_tokens": 1000 * i,
            }
        )
    return {
        "elapsed": 10.0 * i,
        "client": {
            "done": run_done + 3 * i,
            "total": 2000,
            "completed": 3 * i,
            "failed": i // 30,
            "skipped": 0,
            "retries": i // 10,
            "inflight": 192,
            "limit": 192,
            "comp_s": 3.0,
            "tok_s": sum(s["client_tok_s"] for s in servers),
            "server_tok_s": sum(s["tok_s"] for s in servers),
            "eta_s": 600.0,
            "prompt_tokens": 300 * i,
            "completion_tokens": 500 * i,
            "cpu": None,
            "loop_lag_s": None,
            "finish_reasons": {"stop": 2 * i, "length": i},
            "errors": {"TransientError": i // 10},
            "output_len": _hist(i).as_dict(),
        },
        "servers": servers,
        "verdicts": ["state-pool-bound"] if _verdict_shown(i) else [],
        "binding": None,
    }


def write_events(out: Path, ticks: int = 120, runs: int = 2, fmt: int = EVENT_FORMAT) -> Path:
    """A two-run event log of three servers (two hybrids hitting their state cap), verdicts included; ``fmt`` 1
    writes it as the version before the format number did."""
    out.mkdir(parents=True, exist_ok=True)
    clock = {"t": 1_790_000_000.0}
    log = EventLog(out / EVENTS_FILE, "r0", wall=lambda: clock["t"])
    verdict = {
        "rule": "state-pool-bound",
        "binds": "state pool",
        "title": "state-pool bound",
        "severity": "warning",
        "servers": list(URLS[:2]),
        "of_servers": 3,
        "summary": "running 131/131 with 60 queued; state pool 99%, KV only 31%",
        "evidence": [["running / max running", "131/131"], ["cap from the state pool", "394 slots // 3"]],
        "advice": "The recurrent-state (Mamba) pool limits how many requests run at once.",
        "changes": ["--disable-radix-cache --max-running-requests 380", "--mamba-ssm-dtype bfloat16"],
        "predictions": [
            {"change": "--disable-radix-cache --max-running-requests 380", "text": "max running 131 -> 380"}
        ],
    }
    done = 0
    for run in range(runs):
        log.run_id = f"r{run}"
        start: dict[str, Any] = {"format": fmt} if fmt > 1 else {}
        start.update(model="qwen3.6-35b-a3b", api="openai-chat", servers=list(URLS), total=2000, done_before=done)
        log.write("start", **start)
        for i in range(ticks):
            clock["t"] += 10.0
            log.write("tick", **(_tick(i, done) if fmt > 1 else _v1_tick(i, done)))
            if i == 22:
                log.write("verdicts", verdicts=[verdict])
        done += 3 * ticks
        clock["t"] += 5.0
        log.write("end", finished=run == runs - 1, elapsed_s=10.0 * ticks)
        clock["t"] += 600.0  # a pause before the rerun
    log.close()
    return out


def test_series_runs_gaps_and_spans(tmp_path: Path) -> None:
    data = load(write_events(tmp_path / "out"))
    assert len(data.runs) == 2 and data.ticks_total == 240
    assert len(data.times) == 241 and math.isnan(data.times[120])  # a gap between the runs breaks the lines
    assert set(data.servers) == set(URLS)
    assert data.servers[URLS[0]]["running"][30] == 80.0
    assert math.isnan(data.servers[URLS[2]]["state_usage"][0])  # a server without a state pool
    assert data.servers[URLS[0]]["decode_tok_s"][30] == 1600.0 and data.client["client_tok_s"][30] == 3800.0
    assert [(round(s.start), s.end is not None) for s in data.spans] == [(230, True), (1805 + 230, True)]
    assert data.failures_by_type == {"TransientError": 11}


def test_long_logs_are_thinned_but_keep_the_last_tick(tmp_path: Path) -> None:
    data = load(write_events(tmp_path / "out", ticks=500, runs=1), max_points=100)
    assert len(data.times) <= 101
    assert data.client["done"][-1] == 3 * 499
    assert (data.last_tick or {}).get("elapsed_s") == 4990.0


def test_report_page_and_figures(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out")
    (out / "summary.json").write_bytes(
        orjson.dumps({"finished": True, "model": "qwen3.6-35b-a3b", "api": "openai-chat", "total_rows": 2000,
                      "completed_total": 720, "failed_total": 8, "servers": [{}, {}, {}], "gpus": 3,
                      "decode_tok_s": 7000.0, "decode_tok_s_per_gpu": 2333.3, "binding": "state pool"})
    )  # fmt: skip
    path = build_report(out)
    assert path == out / "report.html"
    html = path.read_text()
    names = ("throughput", "running", "pools", "queue", "completions", "output_lengths", "finish_reasons", "failures")
    for name in names:
        png = out / "report" / f"{name}.png"
        assert png.read_bytes().startswith(b"\x89PNG"), name
        assert f"<figure id='{name}'>" in html
    assert html.count("data:image/png;base64,") == len(names)
    assert "<td>binding resource</td><td>state pool</td>" in html
    assert "<td>decode tok/s per GPU</td><td>2,333</td>" in html
    assert "state-pool bound" in html and "--disable-radix-cache --max-running-requests 380" in html
    assert "TransientError" in html
    assert "src='http" not in html and 'src="http' not in html  # self-contained


def test_report_elsewhere_and_without_a_log(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out", ticks=5, runs=1)
    path = build_report(out, tmp_path / "r" / "run.html")
    assert path.exists() and (tmp_path / "r" / "run" / "throughput.png").exists()
    with pytest.raises(OutputError, match="run `tokenmill run`"):
        build_report(tmp_path)


def _plain(series: list[float]) -> list[float | None]:
    return [None if math.isnan(x) else x for x in series]


def test_a_log_of_the_previous_format_reads_as_this_one(tmp_path: Path) -> None:
    """Logs written before the format number (``tok_s`` meaning two things, ``kv``, ``state``, ``output_tokens``,
    verdicts by rule name) read back to the same series, table and verdict spans as today's."""
    old, new = load(write_events(tmp_path / "v1", fmt=1)), load(write_events(tmp_path / "v2"))
    assert old.runs[0].get("format") is None and new.runs[0]["format"] == EVENT_FORMAT
    assert _plain(old.times) == _plain(new.times)
    assert {k: _plain(v) for k, v in old.client.items()} == {k: _plain(v) for k, v in new.client.items()}
    for url in URLS:
        assert {k: _plain(v) for k, v in old.servers[url].items()} == {
            k: _plain(v) for k, v in new.servers[url].items()
        }, url
    assert old.client["decode_tok_s"][30] == 4000.0 and old.client["client_tok_s"][30] == 3800.0
    assert old.servers[URLS[0]]["kv_usage"][0] == 0.2 and old.servers[URLS[0]]["decode_tok_s"][30] == 1600.0
    assert summary_rows(old)[2:] == summary_rows(new)[2:]  # past the output path
    assert [(s.start, s.end) for s in old.spans] == [(s.start, s.end) for s in new.spans]
    assert old.failures_by_type == new.failures_by_type == {"TransientError": 11}
    last = old.last_snapshot
    assert last is not None and [v.rule for v in last.verdicts] == ["state-pool-bound"]
    assert [r.decoded_tokens for r in last.servers] == [119_000] * 3


def test_a_summary_json_of_the_previous_version_reads_with_todays_names(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out", ticks=5, runs=1, fmt=1)
    (out / "summary.json").write_bytes(
        orjson.dumps({"finished": True, "server_decode_tok_s": 7000.0, "output_tok_s": 6500.0, "output_tokens": 9,
                      "servers": [{"url": URLS[0], "output_tokens": 9, "output_tok_s": 6500.0,
                                   "decode_tok_s": 7000.0}]})
    )  # fmt: skip
    summary = load(out).summary
    assert summary is not None
    assert (summary["decode_tok_s"], summary["client_tok_s"], summary["client_tokens"]) == (7000.0, 6500.0, 9)
    assert summary["servers"][0] == {"url": URLS[0], "client_tokens": 9, "client_tok_s": 6500.0, "decode_tok_s": 7000.0}
    rows = dict(summary_rows(load(out)))
    assert rows["decode tok/s (servers, aggregate)"] == "7,000" and rows["output tok/s (client-effective)"] == "6,500"


def _with_expected_rates(out: Path, expected: float, ceiling: float) -> None:
    """Give every server of the log's ticks the planner's expected rate and the roofline's ceiling."""
    path = out / EVENTS_FILE
    lines = []
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("kind") == "tick":
            for row in rec["servers"]:
                row.update(expected_tok_s=expected, ceiling_tok_s=ceiling, gpu="h100")
        lines.append(orjson.dumps(rec))
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_the_report_shows_the_decode_rate_as_a_share_of_what_the_hardware_should_give(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out", ticks=5, runs=1)
    _with_expected_rates(out, expected=1000.0, ceiling=2000.0)
    # the last tick: two servers at 28 running and one at 40, 20 tok/s each: 1,920 of 3,000 expected
    rows = dict(summary_rows(load(out)))
    assert rows["decode rate vs the hardware (now)"] == "64% of expected (h100), 32% of the roofline"
    html = build_report(out).read_text()
    cells = ('<td class="num">56%</td>', '<td class="num">80%</td>')  # each server's share: 560 and 800 of 1,000
    assert "<th>of expected</th>" in html and all(c in html for c in cells)
    # a finished run: the summary's own figure, as its summary.md shows it
    (out / "summary.json").write_bytes(
        orjson.dumps({"finished": True, "expected": "61% of expected (h100), 30% of the roofline"})
    )
    assert dict(summary_rows(load(out)))["decode rate vs the hardware"] == "61% of expected (h100), 30% of the roofline"
