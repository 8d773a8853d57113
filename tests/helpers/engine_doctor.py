"""The doctor against real SGLang servers: small-pool kinds, a job for them, and a run watched until a verdict shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.engines import sglang
from tests.engines.pool import LiveServer, sglang_kind
from tests.helpers.cli import FAST_MONITOR, start_run, stop_run, write_job
from tests.helpers.waiting import wait_for
from tokenmill.monitor.events import EVENTS_FILE, read_events

KV_SMALL = sglang_kind("sglang-dense-kv2048", False, sglang.dense_flags(kv_tokens=2048))


STATE_SMALL = sglang_kind("sglang-hybrid-slots12", True, sglang.hybrid_flags(slots=12))  # no_buffer: 12 // 3 = 4


STATE_FLAGS = ("--mamba-ssm-dtype", "--mamba-radix-cache-strategy", "--mamba-full-memory-ratio", "--max-mamba")


RUN_TIMEOUT_S = 240.0


def write_inputs(tmp: Path, n: int) -> Path:
    prompts = tmp / "prompts.jsonl"
    rows = [{"id": f"q{i:03d}", "prompt": f"Tell me a long story about day {i}."} for i in range(n)]
    prompts.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return prompts


def job_for(tmp: Path, server: LiveServer, n: int, max_tokens: int, concurrency: int | str) -> tuple[Path, Path]:
    out = tmp / "out"
    job = write_job(
        tmp / "job.yaml",
        [server.base_url],
        write_inputs(tmp, n),
        out,
        model=server.model,
        sampling={"max_tokens": max_tokens, "extra_body": {"ignore_eos": True}},
        concurrency=concurrency,
        monitor=FAST_MONITOR,
    )
    return job, out


def verdicts(out: Path) -> list[dict[str, Any]]:
    """Every verdict the run's doctor showed, in order."""
    return [v for r in read_events(out / EVENTS_FILE) if r["kind"] == "verdicts" for v in r["verdicts"]]


def named(out: Path, rule: str) -> dict[str, Any] | None:
    return next((v for v in verdicts(out) if v["rule"] == rule), None)


def run_until(job: Path, out: Path, what: str, check: Any) -> Any:
    """Start ``tokenmill run``, wait until ``check()`` holds, stop the run; returns what ``check`` returned."""
    proc = start_run(job)
    try:
        return wait_for(what, lambda: (out / EVENTS_FILE).exists() and check(), timeout=RUN_TIMEOUT_S)
    finally:
        stop_run(proc)
