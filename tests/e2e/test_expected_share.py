"""How far a run is from what its hardware should give, live: a twin says its GPU, the run's monitor plans the
twin's flags and the workload so far, and the status line, the event log and ``tokenmill status`` show the decode
rate as a share of that expectation and of the roofline's ceiling (the twin's time scale taken out)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.helpers.cli import FAST_MONITOR, TWIN, run_cli, start_run, stop_run, write_job
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess, start_sim
from tokenmill.monitor.events import EVENTS_FILE, read_events
from tokenmill.monitor.snapshot import Snapshot


def _expected_ticks(out: Path) -> list[Snapshot]:
    if not (out / EVENTS_FILE).exists():
        return []
    ticks = [Snapshot.from_event(r) for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    return [t for t in ticks if t.expected_shares() is not None and t.done > 0]


def long_job(tmp_path: Path, url: str) -> tuple[Path, Path]:
    """More prompts than the run lasts in the test: it is stopped once the status has been read."""
    data = tmp_path / "in.jsonl"
    with data.open("wb") as f:
        for i in range(40_000):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": f"Tell a long story about the number {i}. " * 8}) + b"\n")
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [url], data, out, concurrency=300, model="qwen3.6-35b-a3b",
        sampling={"max_tokens": 512}, monitor=FAST_MONITOR, output={"dir": str(out), "shard_size": 5000},
    )  # fmt: skip
    return job, out


@pytest.fixture
def slow_twin() -> Iterator[SimProcess]:
    """The twin of Qwen3.6-35B-A3B on an H200, at a fifth of real time: slow enough that a loaded test machine's
    client keeps it full (at 50x its requests come faster than a busy client sends them, and the share shows it)."""
    proc = start_sim(["--model", *TWIN, "--time-scale", "0.2", "--log-level", "warning"])
    try:
        yield proc
    finally:
        proc.stop()


def test_a_status_mid_run_shows_the_share_of_the_expected_rate(slow_twin: SimProcess, tmp_path: Path) -> None:
    job, out = long_job(tmp_path, slow_twin.url)
    proc = start_run(job, "--compare-gpu", "b200")
    try:
        wait_for("ticks with the planner's expected rate", lambda: len(_expected_ticks(out)) >= 12, timeout=120)
        res = run_cli("status", str(out))
        look = ("--samples", "3", "--interval", "1", "--max-seconds", "8", "--json")
        doc = run_cli("doctor", "--servers", slow_twin.url, "--compare-gpu", "b200", *look)
    finally:
        stop_run(proc)
    assert res.returncode == 0, res.stderr
    assert "running" in res.stdout
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("| decode rate vs the hardware |"))
    assert "% of expected (h200)" in row and "% of the roofline" in row, row
    assert "% of b200 (the same workload planned on it)" in row, row  # --compare-gpu b200
    ticks = _expected_ticks(out)
    server = ticks[-1].servers[0]
    assert server.gpu == "h200" and server.expected_tok_s and server.ceiling_tok_s
    # the twin runs the planner's physics at 5x (time scale 0.2): once full, it decodes about what is expected
    shares = [t.expected_shares() or (0.0, 0.0) for t in ticks[4:]]
    best = max(shares)
    assert 0.7 <= best[0] <= 1.3, shares
    assert all(0.0 < c < e for e, c in shares)  # the roofline's ceiling is above what the planner expects
    # on the twin's clock: 5x what the planner gives one H200 (a few thousand tok/s) for these flags and lengths
    assert 5 * 1000 < server.expected_tok_s < 5 * 20_000
    # a B200 moves 1.6x the H200's bytes a second: the same workload is planned faster there
    assert server.compare_gpu == "b200" and server.compare_tok_s and server.compare_tok_s > server.expected_tok_s
    # the stand-alone doctor says the same from its own look at the twin, on the GPU's clock
    assert doc.returncode == 0, doc.stderr
    (hw,) = json.loads(doc.stdout)["vs_hardware"]
    assert hw["gpu"] == "h200" and hw["compare_gpu"] == "b200" and 0.5 <= hw["expected_share"] <= 1.3, hw
    assert hw["ceiling_share"] < hw["expected_share"] and hw["compare_share"] < hw["expected_share"]
    assert abs(hw["expected_tok_s"] * 5 - server.expected_tok_s) <= 0.2 * server.expected_tok_s  # time scale 0.2
