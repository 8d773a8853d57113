"""The doctor, ``concurrency: auto`` and ``tokenmill calibrate`` through the CLI, against real SGLang servers
whose binding resource is known from their flags: a dense server with a small KV pool and long answers, a
hybrid whose state pool caps it at 4 running, and a client that sends far fewer requests than a server runs.

Real gauges are snapshots written at batch boundaries; these tests assert what must hold of a whole run (a
verdict that was named, advice that was never given), not what one sampled moment shows.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.engines.pool import LiveServer, ServerPool
from tests.helpers.cli import TOKENMILL, start_run, stop_run
from tests.helpers.engine_doctor import (
    KV_SMALL,
    STATE_FLAGS,
    STATE_SMALL,
    job_for,
    named,
    run_until,
    verdicts,
)
from tests.helpers.servers import live_server
from tokenmill.monitor.events import EVENTS_FILE, read_events


def ticks(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]


@pytest.fixture
def kv_small(server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, KV_SMALL.name)


@pytest.fixture
def state_small(server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, STATE_SMALL.name)


@pytest.mark.server_kind(KV_SMALL.name)
def test_dense_server_with_a_small_kv_pool_is_kv_bound_and_gets_no_state_advice(
    kv_small: LiveServer, tmp_path: Path
) -> None:
    """2,048 KV tokens, answers of 900: SGLang 0.5.23 admits a request only when its prompt and whole
    max_tokens fit beside the running ones, so 2 run, the queue stands, and the KV gauge shows about half the
    pool in use (its admission is exact here, so it does not retract: its retraction count is in the evidence)."""
    job, out = job_for(tmp_path, kv_small, n=40, max_tokens=900, concurrency=16)
    verdict = run_until(job, out, "a KV-bound verdict", lambda: named(out, "kv-bound"))
    evidence = dict(verdict["evidence"])
    assert evidence["requests that fit at full length"].startswith("2 x ")
    assert evidence["retractions per minute"] != "?"
    assert not any(flag in change for change in verdict["changes"] for flag in STATE_FLAGS), verdict["changes"]
    assert "--kv-cache-dtype fp8_e4m3" in verdict["changes"]
    rules = {v["rule"] for v in verdicts(out)}
    assert not rules & {"state-pool-bound", "scheduler-conservative"}, rules


@pytest.mark.server_kind(STATE_SMALL.name)
def test_hybrid_capped_by_its_state_pool_is_state_bound_with_the_advice_that_applies(
    state_small: LiveServer, tmp_path: Path
) -> None:
    job, out = job_for(tmp_path, state_small, n=60, max_tokens=300, concurrency=32)
    verdict = run_until(job, out, "a state-pool verdict", lambda: named(out, "state-pool-bound"))
    evidence = dict(verdict["evidence"])
    assert evidence["cap from the state pool"] == "12 slots // 3"
    assert evidence["state mode"] == "no_buffer + radix cache"
    assert evidence["running / max running"].split()[0].endswith("/4")  # the mean, then the peak when it differs
    changes = verdict["changes"]
    assert any(c.startswith("--disable-radix-cache --max-running-requests") for c in changes), changes
    assert "--mamba-ssm-dtype bfloat16" in changes
    assert not any("--mamba-scheduler-strategy" in c for c in changes)  # 0.5.23 refuses the old spelling
    assert "scheduler-conservative" not in {v["rule"] for v in verdicts(out)}


@pytest.mark.server_kind(STATE_SMALL.name)
def test_auto_concurrency_learns_the_cap_the_real_server_reports(state_small: LiveServer, tmp_path: Path) -> None:
    job, out = job_for(tmp_path, state_small, n=60, max_tokens=200, concurrency="auto")

    def settled() -> dict[str, Any] | None:
        rows = [r["servers"][0] for r in ticks(out)]
        return next((s for s in reversed(rows) if s.get("max_running") == 4 and s.get("limit")), None)

    row = run_until(job, out, "the in-flight target from the server's cap", settled)
    # the server's cap (from /server_info's internal_states) plus a small queue, not the controller's start
    assert 4 < row["limit"] <= 4 + 8, row


def test_a_client_far_below_the_servers_cap_is_told_it_under_feeds(sglang_dense: LiveServer, tmp_path: Path) -> None:
    job, out = job_for(tmp_path, sglang_dense, n=40, max_tokens=400, concurrency=2)
    verdict = run_until(job, out, "an under-feeding verdict", lambda: named(out, "client-underfeeding"))
    assert dict(verdict["evidence"])["client in flight / limit"].endswith("/2 (at its limit)")
    assert verdict["changes"][0].startswith("--concurrency ")


def test_calibrate_fits_a_live_server(sglang_dense: LiveServer, tmp_path: Path) -> None:
    """``tokenmill calibrate`` end to end: scrapes the real server under load and fits eta for a GPU file."""
    gpu_file = tmp_path / "gpus.yaml"
    gpu_file.write_text(
        "gpus:\n  - key: this-cpu\n    name: the test machine's CPU\n    memory_mib: 8192\n"
        "    bandwidth_gbs: 5\n    bf16_tflops: 0.2\n    sources: [a test stand-in]\n"
    )
    job, _ = job_for(tmp_path, sglang_dense, n=24, max_tokens=400, concurrency=12)
    proc = start_run(job)
    try:
        res = subprocess.run(
            [
                *TOKENMILL,
                "calibrate",
                *("-m", str(sglang_dense.model_dir / "config.json"), "-g", "this-cpu", "--gpu-file", str(gpu_file)),
                *("--flags", " ".join(sglang_dense.kind.flags), "--server", sglang_dense.base_url),
                *("--window", "20", "--interval", "0.5", "--samples", "4", "--json"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        stop_run(proc)
    assert res.returncode == 0, res.stderr
    fit = json.loads(res.stdout)
    assert 0 < fit["eta_bw"] <= 1 and fit["samples_used"] >= 1, fit
    assert fit["implied_min"] <= fit["eta_bw"] <= fit["implied_max"]
