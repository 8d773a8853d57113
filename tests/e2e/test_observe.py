"""Watching real runs: the event log, the Prometheus exporter, status and doctor from another terminal,
the report afterwards, and the doctor against the simulated twin of a state-bound hybrid SGLang server."""

from __future__ import annotations

import json
import math
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from tests.helpers.cli import FAST_MONITOR, TWIN, run_cli, start_run, stop_run, write_job, write_prompts
from tests.helpers.waiting import wait_for, wait_for_match
from tokenmill.cli import cli
from tokenmill.fleet.simprocs import SimProcess, start_sim
from tokenmill.monitor.events import EVENTS_FILE, read_events
from tokenmill.planner import PoolPlan, server_capacity


def twin_pools() -> PoolPlan:
    """The pools the twin (and the planner) size for this model, GPU and the default flags."""
    return server_capacity(TWIN[0], TWIN[2]).pools


def live_cli(*args: str) -> Result:
    """The command run in this process (click's CliRunner), for the checks made while a watched run runs: a
    subprocess of ``status`` imports for 5 s on a quiet machine and took 15-28 s beside two CPU hogs, time in which
    the run it watches may end. The commands' modules are imported here once (:func:`_import_live_commands`)."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _import_live_commands() -> None:
    """Import what ``status`` and ``doctor`` import when they run, before a run starts (their first use in this
    process would otherwise pay it while the run goes on)."""
    import tokenmill.cli.doctor
    import tokenmill.cli.status
    import tokenmill.doctor.checkup
    import tokenmill.doctor.render
    import tokenmill.report.status
    import tokenmill.run.access
    import tokenmill.storage.place  # noqa: F401


def verdict_rules(out: Path) -> list[list[str]]:
    return [[v["rule"] for v in r["verdicts"]] for r in read_events(out / EVENTS_FILE) if r["kind"] == "verdicts"]


PROMPTS = 1_600
# The simulators at a fifth of real time (answers of ~40 tokens in ~0.2 s): at 0.05 the client had to send ~100
# requests a second to hold its 4 in flight per server, and beside two CPU hogs it held 2.8 of them, so the doctor
# rightly called the servers under-fed by a client below its limit
WATCHED_SIMS = ["--time-scale", "0.2", "--max-running-requests", "64", "--output-len-mean", "64"]


@pytest.mark.parametrize("fleet", [(2, WATCHED_SIMS)], indirect=True)
def test_a_watched_run_from_start_to_report(fleet: list[SimProcess], tmp_path: Path) -> None:
    # enough prompts that the run still runs when a busy machine has started `status` and `doctor` beside it
    data = write_prompts(tmp_path / "in.jsonl", PROMPTS)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [s.url for s in fleet], data, out, concurrency=4, monitor=FAST_MONITOR,
        sampling={"max_tokens": 64},
    )  # fmt: skip
    _import_live_commands()
    proc = start_run(job, "--metrics-port", "0")
    try:
        log = out / "tokenmill.log"
        url = wait_for_match("the metrics URL in the log", log, r"metrics for Prometheus at (\S+)").group(1)
        assert url.startswith("http://127.0.0.1:")
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "tokenmill_completions_total" in body and "tokenmill_request_latency_seconds_bucket" in body
        assert 'tokenmill_server_max_running{server="' in body or "tokenmill_inflight" in body
        # from another terminal while it runs (once the first snapshot is in the event log)
        events = out / EVENTS_FILE
        wait_for("the first event", lambda: events.exists() and b'"tick"' in events.read_bytes())
        status = live_cli("status", str(out))
        assert status.exit_code == 0, status.output
        assert status.stdout.startswith("running (last update"), status.stdout
        servers = [a for s in fleet for a in ("--servers", s.url)]
        doctor = live_cli(
            "doctor", *servers, "--output", str(out), "--samples", "3", "--interval", "0.5", "--max-seconds", "8"
        )
        assert doctor.exit_code == 0, doctor.output
        assert "binding resource: client concurrency (client under-feeding)" in doctor.stdout, doctor.stdout
        assert "--concurrency 80" in doctor.stdout
        wait_for("the run's own doctor verdict", lambda: any("client-underfeeding" in v for v in verdict_rules(out)))
        assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        stop_run(proc)
    kinds = [r["kind"] for r in read_events(out / EVENTS_FILE)]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("tick") >= 2
    summary = (out / "summary.md").read_text()
    assert "| binding resource | client concurrency (" in summary
    assert re.search(r"\| decode tok/s \(servers, aggregate\) \| [\d,]+ \(time-scaled: [^|]+\) \|", summary), summary
    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 6 and "client under-feeding" in html
    after = run_cli("status", str(out), "--json")
    st = json.loads(after.stdout)
    assert st["state"] == "finished" and st["completed_total"] == PROMPTS and st["binding"] == "client concurrency"
    # the finished run's status is the table the run printed at its end: per-server output tokens, decode rates
    # and verdict lines included
    table = run_cli("status", str(out))
    assert table.stdout.startswith("finished ") and table.stdout.split("\n\n", 1)[1] == summary + "\n"
    assert all(s["client_tokens"] > 0 and s["decode_tok_s"] for s in st["servers"]), st["servers"]
    assert sum(s["client_tokens"] for s in st["servers"]) == st["client_tokens"]


@pytest.fixture
def twin() -> Iterator[SimProcess]:
    """The twin of an SGLang server running Qwen3.6-35B-A3B on an H200 with default flags (extra_buffer).

    Its clock runs 5x fast: 80 requests of ~500 tokens then finish ~30 times a second, which one client process
    keeps fed on a busy machine (at 50x the client fell behind and the queue drained while the doctor sampled)."""
    proc = start_sim(["--model", *TWIN, "--time-scale", "0.2", "--log-level", "warning"])
    try:
        yield proc
    finally:
        proc.stop()


def load_job(tmp_path: Path, url: str, concurrency: int, **extra: Any) -> tuple[Path, Path]:
    data = tmp_path / "in.jsonl"
    with data.open("wb") as f:
        for i in range(4000):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": f"Tell a long story about the number {i}. " * 8}) + b"\n")
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [url], data, out, concurrency=concurrency, model="qwen3.6-35b-a3b",
        sampling={"max_tokens": 512}, monitor=FAST_MONITOR, output={"dir": str(out), "shard_size": 500}, **extra,
    )  # fmt: skip
    return job, out


def test_doctor_names_the_state_pool_of_a_state_bound_twin(twin: SimProcess, tmp_path: Path) -> None:
    # a fixed concurrency is a ceiling (the server's cap plus a small queue): a deep queue is asked for as such
    job, out = load_job(tmp_path, twin.url, concurrency=300, control={"queue_min": 64, "queue_max": 64})
    proc = start_run(job)
    try:
        wait_for("a queue at the twin", lambda: (out / EVENTS_FILE).exists() and _queued(out) > 50)
        res = run_cli(
            "doctor", "--servers", twin.url, "--samples", "3", "--interval", "1", "--max-seconds", "8", "--json"
        )
    finally:
        stop_run(proc)
    assert res.returncode == 0, res.stderr
    verdicts = json.loads(res.stdout)["verdicts"]
    first = verdicts[0]
    assert first["rule"] == "state-pool-bound" and first["binds"] == "state pool", res.stdout
    evidence = dict(first["evidence"])
    pools = twin_pools()
    assert evidence["cap from the state pool"] == f"{pools.mamba_slots} slots // 5"
    assert evidence["state mode"] == "extra_buffer + radix cache"
    changes = first["changes"]
    assert any("--disable-radix-cache --max-running-requests" in c for c in changes)
    assert "--mamba-ssm-dtype bfloat16" in changes
    assert "--mamba-radix-cache-strategy extra_buffer_lazy" in changes
    predictions = {p["change"]: p for p in first["predictions"]}
    for change in changes:  # the twin says its model and GPU, so every change has the planner's numbers
        p = predictions[change]
        assert p["source"] == "planner"
        assert p["before"]["max_running"] == pools.max_running
        assert p["after"]["max_running"] > pools.max_running
        assert p["after"]["tok_s_per_gpu"] > p["before"]["tok_s_per_gpu"]


def _queued(out: Path) -> float:
    ticks = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    return float((ticks[-1]["servers"][0].get("queued") or 0) if ticks else 0)


def test_doctor_says_the_client_under_feeds_a_twin(twin: SimProcess, tmp_path: Path) -> None:
    job, out = load_job(tmp_path, twin.url, concurrency=8)
    proc = start_run(job)
    try:
        wait_for("the run's doctor verdict", lambda: any("client-underfeeding" in v for v in verdict_rules(out)))
        res = run_cli(
            "doctor",
            "--servers",
            twin.url,
            "--output",
            str(out),
            "--samples",
            "3",
            "--interval",
            "0.5",
            "--max-seconds",
            "8",
        )
    finally:
        stop_run(proc)
    assert res.returncode == 0, res.stderr
    assert "binding resource: client concurrency (client under-feeding)" in res.stdout, res.stdout
    # the in-flight number is a mean over the client's window (7.9 as often as 8): the limit and the verdict are
    # what must hold
    assert re.search(r"client in flight / limit\s+[0-9.]+/8 \(at its limit\)", res.stdout), res.stdout
    want = math.ceil(1.25 * twin_pools().max_running)  # feed_headroom x the twin's cap
    assert f"--concurrency {want}" in res.stdout
