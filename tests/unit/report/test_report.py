"""``tokenmill report`` from an event log: series, verdict spans, thinning, the page and its figures."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from tests.helpers.events import URLS, write_events
from tokenmill.errors import OutputError
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE
from tokenmill.report import build_report, load
from tokenmill.report.html import summary_rows


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
