"""``tokenmill report`` from an event log: series, verdict spans, thinning, the page and its figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenmill.errors import OutputError
from tokenmill.monitor.client import OUTPUT_LEN_BUCKETS, Histogram
from tokenmill.monitor.events import EVENTS_FILE, EventLog
from tokenmill.report import build_report, load

URLS = ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000")


def _tick(i: int, run_done: int) -> dict[str, Any]:
    hist = Histogram(OUTPUT_LEN_BUCKETS)
    for n in range(i + 1):
        hist.observe(100 + (n * 37) % 900)
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
                "kv": 0.2 + 0.1 * k,
                "state": running / 131 if k < 2 else None,
                "tok_s": 20.0 * running,
                "client_tok_s": 19.0 * running,
                "inflight": 64,
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
            "finish_reasons": {"stop": 2 * i, "length": i},
            "errors": {"TransientError": i // 10},
            "output_len": hist.as_dict(),
        },
        "servers": servers,
        "verdicts": ["state-pool-bound"] if i > 20 else [],
    }


def write_events(out: Path, ticks: int = 120, runs: int = 2) -> Path:
    """A two-run event log of three servers (two hybrids hitting their state cap), verdicts included."""
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
        log.write("start", model="qwen3.6-35b-a3b", api="openai-chat", servers=list(URLS), total=2000, done_before=done)
        for i in range(ticks):
            clock["t"] += 10.0
            log.write("tick", **_tick(i, done))
            if i == 22:
                log.write("verdicts", verdicts=[verdict])
        done += 3 * ticks
        clock["t"] += 5.0
        log.write("end", finished=run == runs - 1, elapsed=10.0 * ticks)
        clock["t"] += 600.0  # a pause before the rerun
    log.close()
    return out


def test_series_runs_gaps_and_spans(tmp_path: Path) -> None:
    data = load(write_events(tmp_path / "out"))
    assert len(data.runs) == 2 and data.ticks_total == 240
    assert len(data.times) == 241 and math.isnan(data.times[120])  # a gap between the runs breaks the lines
    assert set(data.servers) == set(URLS)
    assert data.servers[URLS[0]]["running"][30] == 80.0
    assert math.isnan(data.servers[URLS[2]]["state"][0])  # a server without a state pool
    assert [(round(s.start), s.end is not None) for s in data.spans] == [(230, True), (1805 + 230, True)]
    assert data.failures_by_type == {"TransientError": 11}


def test_long_logs_are_thinned_but_keep_the_last_tick(tmp_path: Path) -> None:
    data = load(write_events(tmp_path / "out", ticks=500, runs=1), max_points=100)
    assert len(data.times) <= 101
    assert data.client["done"][-1] == 3 * 499
    assert (data.last_tick or {}).get("elapsed") == 4990.0


def test_report_page_and_figures(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out")
    (out / "summary.json").write_bytes(
        orjson.dumps({"finished": True, "model": "qwen3.6-35b-a3b", "api": "openai-chat", "total_rows": 2000,
                      "completed_total": 720, "failed_total": 8, "servers": [{}, {}, {}], "gpus": 3,
                      "server_decode_tok_s": 7000.0, "decode_tok_s_per_gpu": 2333.3, "binding": "state pool"})
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
