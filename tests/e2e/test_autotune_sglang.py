"""--autotune end to end on the real SGLang 0.5.23 CPU server: a fleet of one tiny hybrid GDN server capped at 4
running by its state pool (12 slots, no_buffer: 3 a request) is started from a profile by `tokenmill run --fleet
--autotune`; the doctor names the state pool, the planner (given the machine as a GPU file) predicts the radix-off
change, the tuner applies it through the rolling re-flag (a real restart), measures the server's decode rate
against its own before, and keeps or rolls it back. Nothing is lost or recorded twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engines import sglang
from tests.engines.pool import ServerPool
from tests.helpers.cli import read_records, run_cli, start_run, stop_run, write_job
from tests.helpers.engine_doctor import write_inputs
from tests.helpers.waiting import wait_for
from tokenmill.monitor.events import EVENTS_FILE, read_events

pytestmark = [pytest.mark.sglang, pytest.mark.own_engine]

GPU_FILE = """gpus:
  - key: this-cpu
    name: the test machine's CPU
    memory_mib: 8192
    bandwidth_gbs: 5
    bf16_tflops: 0.2
    sources: [a test stand-in]
"""
DECIDED = ("rolled-out", "rolled-back", "failed")


def autotune_steps(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "autotune" and r["step"] != "note"]


def test_autotune_changes_measures_and_decides_on_a_real_sglang_server(
    tmp_path: Path, engines_down: ServerPool
) -> None:
    python = sglang.sglang_python()  # skips (or fails under make test) when SGLang is not installed
    sglang.build_model(python, "hybrid", sglang.HYBRID_DIR)
    env = sglang.engine_env()
    (tmp_path / "gpus.yaml").write_text(GPU_FILE)
    profile = {
        "engine": "sglang",
        "model": str(sglang.HYBRID_DIR),
        "python": str(python),
        "gpus": 1,
        "base_port": 0,
        "flags": {
            "served-model-name": sglang.SERVED_MODEL,
            "mamba-radix-cache-strategy": "no_buffer",
            "disable-overlap-schedule": True,
            "max-mamba-cache-size": 12,  # no_buffer: 3 slots a request, so 4 run
            "max-total-tokens": 4096,
            "device": "cpu",
            "attention-backend": "torch_native",
            "sleep-on-idle": True,
            "dtype": "float32",
            "random-seed": 0,
        },
        "env": {k: env[k] for k in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
        "start_timeout_s": sglang.START_DEADLINE_S,
        "drain_notice_s": 1.0,
        "drain_timeout_s": 60,
        "state_dir": str(tmp_path / "fleet"),
        "autotune": {
            "window_s": 12,
            "max_window_s": 36,
            "warmup_s": 6,
            "cooldown_s": 5,
            "min_remaining_s": 0,
            "max_changes": 1,
        },
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(profile))
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [], write_inputs(tmp_path, 400), out, model=sglang.SERVED_MODEL, concurrency="auto",
        sampling={"max_tokens": 120, "extra_body": {"ignore_eos": True}},
        monitor={"scrape_interval_s": 1.0, "event_interval_s": 1.0, "rate_window_s": 10.0, "gpu": "this-cpu",
                 "gpu_file": str(tmp_path / "gpus.yaml")},
    )  # fmt: skip
    run = start_run(job, "--fleet", str(tmp_path / "fleet.yaml"), "--autotune")
    try:
        decided = wait_for(
            "the tuner's decision",
            lambda: [s for s in autotune_steps(out) if s["step"] in DECIDED] if (out / EVENTS_FILE).exists() else [],
            timeout=780,
        )
    finally:
        stop_run(run)
    steps = autotune_steps(out)
    names = [s["step"] for s in steps]
    assert names[:2] == ["canary", "canary-up"], steps
    assert decided[0]["step"] in ("rolled-out", "rolled-back"), steps  # applied, measured, and decided
    canary = steps[0]
    assert "--disable-radix-cache --max-running-requests" in canary["change"] and canary["predicted_gain"] > 0.1
    decision = next(s for s in steps if s["step"] in ("keep", "roll-back"))
    measured = decision["measured"]
    assert measured["before_tok_s"] > 0 and measured["after_tok_s"] > 0 and measured["gain_vs_peers"] is None
    kept = decision["step"] == "keep"
    assert (measured["gain"] - 2 * measured["stderr"] >= 0.03) == kept, decision
    log = (tmp_path / "fleet" / "server-0.log").read_text(errors="replace")
    assert log.count("The server is fired up and ready to roll!") >= 2  # started, then restarted with the change
    done, failed = read_records(out)
    ids = [r["id"] for r in done]
    assert ids and len(ids) == len(set(ids)) and not failed
    check = run_cli("verify", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    print(json.dumps({"steps": names, "measured": measured, "kept": kept}))
