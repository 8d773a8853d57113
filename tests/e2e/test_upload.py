"""`tokenmill run` with output.remote against a real S3 API (moto's server on loopback), then verify --remote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tests.helpers.s3server import S3, TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess

PREFIX = "corpora/sharegpt/run-1/"
FAST_UPLOAD = {"backoff_base_s": 0.05, "backoff_max_s": 0.5, "drain_timeout_s": 60, "start_wait_s": 10}


def job_with_remote(tmp: Path, fleet: list[SimProcess], s3: S3, n: int, **upload: Any) -> tuple[Path, Path]:
    data = write_prompts(tmp / "in.jsonl", n)
    out = tmp / "out"
    output = {
        "shard_size": 50,
        "remote": s3.url(PREFIX),
        "storage_options": s3.options(),
        "upload": {**FAST_UPLOAD, **upload},
    }
    return write_job(tmp / "job.yaml", [s.url for s in fleet], data, out, output=output), out


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=timeout, env=TEST_ENV)


def local_shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("completions_*.jsonl"))}


def remote_shards(s3: S3) -> dict[str, bytes]:
    return {k[len(PREFIX) :]: s3.get(k) for k in s3.objects(PREFIX) if k[len(PREFIX) :].startswith("completions_")}


def test_a_run_uploads_every_shard_and_verify_remote_proves_it(fleet: list[SimProcess], s3: S3, tmp_path: Path) -> None:
    job, out = job_with_remote(tmp_path, fleet, s3, 230)
    res = run("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert "upload: all 5 shards are at s3://" in res.stderr
    assert remote_shards(s3) == local_shards(out)
    objects = set(s3.objects(PREFIX))
    books = {k for k in objects if k.startswith(PREFIX + "_tokenmill/")}
    assert objects - books == {PREFIX + n for n in [*local_shards(out), "_tokenmill_manifest.json", "_SUCCESS"]}
    side = {PREFIX + "_tokenmill/" + n for n in ("job.json", "events.jsonl", "summary.json")}
    assert side <= books and all(k.startswith(PREFIX + "_tokenmill/ids/") for k in books - side)
    assert orjson.loads(s3.get(PREFIX + "_SUCCESS"))["completions"] == 230
    assert "testing" not in (out / "job.json").read_text()  # no credential ends up in the output
    assert "testing" not in s3.get(PREFIX + "_tokenmill/job.json").decode()  # nor in its remote copy
    ok = run("verify", str(out), "--remote")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "5 of 5 sealed shards match (230 completions" in ok.stdout
    s3.put(PREFIX + "completions_000002.jsonl", b'{"id": "tampered"}\n')
    s3.client().delete_object(Bucket=s3.bucket, Key=PREFIX + "completions_000004.jsonl")
    bad = run("verify", str(out), "--remote", "--json")
    assert bad.returncode == 1
    report = orjson.loads(bad.stdout)
    assert report["problem_totals"] == {"remote-mismatch": 1, "remote-missing": 1}


def test_a_prefix_with_foreign_objects_is_refused_before_anything_is_generated(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    s3.put(PREFIX + "README.md", b"someone else's data\n")
    job, out = job_with_remote(tmp_path, fleet, s3, 60)
    res = run("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "already holds 1 object(s) this job did not write (README.md)" in res.stderr
    assert "--allow-existing-prefix" in res.stderr
    assert "Traceback" not in res.stderr
    assert read_records(out) == ([], [])
    res = run("run", str(job), "--no-live", "--allow-existing-prefix")
    assert res.returncode == 0, res.stderr
    assert s3.get(PREFIX + "README.md") == b"someone else's data\n"
    assert remote_shards(s3) == local_shards(out)
    assert run("verify", str(out), "--remote").returncode == 0


def test_a_store_down_for_the_whole_run_leaves_a_complete_local_output_and_a_resumable_upload(
    fleet: list[SimProcess], own_s3: S3, tmp_path: Path
) -> None:
    job, out = job_with_remote(tmp_path, fleet, own_s3, 120, drain_timeout_s=1, start_wait_s=1)
    own_s3.stop()
    res = run("run", str(job), "--no-live")
    assert res.returncode == 3, res.stderr
    assert "upload incomplete: 3 of 3 shards are not at s3://" in res.stderr
    assert "rerun the same command to upload what is missing" in res.stderr
    assert run("verify", str(out)).returncode == 0  # the local corpus is whole
    own_s3.restart()
    res = run("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert "upload: all 3 shards" in res.stderr
    assert remote_shards(own_s3) == local_shards(out)
    assert run("verify", str(out), "--remote").returncode == 0


def count_remote(s3: S3) -> int:
    try:
        return sum(1 for k in s3.objects(PREFIX) if "completions_" in k)
    except Exception:
        return -1


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "16"])], indirect=True)
def test_sigkill_mid_upload_then_resume(fleet: list[SimProcess], own_s3: S3, tmp_path: Path) -> None:
    n = 800
    job, out = job_with_remote(tmp_path, fleet, own_s3, n, manifest_interval_s=5, start_wait_s=1)
    cmd = [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"]
    env = {**os.environ, **TEST_ENV}
    # 1: killed while uploads flow, once at least two shards are up
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_for("two shards uploaded", lambda: count_remote(own_s3) >= 2, every_s=0.01, alive=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # 2: the store goes down, shards pile up locally, killed while their uploads are retried
    own_s3.stop()
    sealed_before = len(local_shards(out))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_for("two more shards sealed", lambda: len(local_shards(out)) >= sealed_before + 2, every_s=0.01, alive=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    own_s3.restart()
    assert len(remote_shards(own_s3)) < len(local_shards(out))
    res = run("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed
    assert Counter(r["id"] for r in done) == Counter(f"p{i:05d}" for i in range(n))
    assert remote_shards(own_s3) == local_shards(out)
    verify = run("verify", str(out), "--remote", "--input", str(job))
    assert verify.returncode == 0, verify.stdout + verify.stderr
