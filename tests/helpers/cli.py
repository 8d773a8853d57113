"""Driving tokenmill as a user does: the CLI in a subprocess, job and prompt files, the records a run wrote,
a run started and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

TOKENMILL = [sys.executable, "-m", "tokenmill"]


def write_prompts(path: Path, n: int, start: int = 0) -> Path:
    with path.open("wb") as f:
        for i in range(start, start + n):
            f.write(orjson.dumps({"id": f"p{i:05d}", "prompt": f"Write a line about the number {i}."}) + b"\n")
    return path


def write_job(path: Path, servers: list[str], input_path: Path, out: Path, **extra: Any) -> Path:
    job: dict[str, Any] = {
        "input": {"path": str(input_path), "id_field": "id"},
        "servers": servers,
        "api": "openai-chat",
        "model": "tokenmill-sim",
        "sampling": {"max_tokens": 64},
        "concurrency": 16,
        "output": {"dir": str(out), "shard_size": 50},
        "retry": {"backoff_base_s": 0.01, "backoff_max_s": 0.2, "probe_interval_s": 0.2},
        "status_interval_s": 1,
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(job.get(key), dict):
            job[key] = {**job[key], **value}
        else:
            job[key] = value
    path.write_text(yaml.safe_dump(job))
    return path


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOKENMILL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def read_records(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All completion records (sealed and open shards) and all failure records.

    A killed writer may leave a torn last line in the open shard (the next run cuts it); it is not a record.
    """
    done: list[dict[str, Any]] = []
    for shard in sorted(out.glob("completions_*.jsonl*")):
        data = shard.read_bytes()
        if shard.suffix == ".open" and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
        done += [orjson.loads(line) for line in data.splitlines() if line]
    failed_file = out / "failed.jsonl"
    failed = (
        [orjson.loads(line) for line in failed_file.read_bytes().splitlines() if line] if failed_file.exists() else []
    )
    return done, failed


FAST_MONITOR = {"scrape_interval_s": 0.5, "event_interval_s": 0.5, "rate_window_s": 5.0}


TWIN = ("qwen3.6-35b-a3b", "--gpu", "h200")  # SGLang's default flags: extra_buffer, 5 state slots a request


def start_run(job: Path, *args: str, output: Path | None = None) -> subprocess.Popen[str]:
    """``tokenmill run JOB --no-live ARGS`` in the background; its stdout and stderr piped, or written to ``output``
    (a run watched for minutes: a pipe nobody reads would fill and stall it)."""
    argv = [*TOKENMILL, "run", str(job), "--no-live", *args]
    if output is None:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with output.open("w") as sink:  # the child holds its own copy of the descriptor
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, text=True)


def stop_run(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
