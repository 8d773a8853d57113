"""``samples: 3`` through the whole CLI against simulated servers: exactly once per (id, k) through SIGKILLs and the
loss of a machine (the output directory deleted, the same job rerun: taken over from the remote prefix), seeds
distinct and recorded, verify's count per row, and both export layouts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import read_records, run_cli, write_job
from tests.helpers.s3server import S3, TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.sources.samples import sample_seed

SAMPLES = 3
PREFIX = "corpora/samples/run-1/"
TOKENMILL = [sys.executable, "-m", "tokenmill"]


def write_rows(path: Path, n: int) -> list[str]:
    ids = [f"q{i:04d}" for i in range(n)]
    path.write_bytes(b"".join(orjson.dumps({"id": i, "prompt": f"Tell me about {i}."}) + b"\n" for i in ids))
    return ids


def expected(ids: list[str]) -> Counter[str]:
    return Counter(f"{i}_gen{k}" for i in ids for k in range(SAMPLES))


def records_so_far(out: Path) -> int:
    total = 0
    for p in out.glob("completions_*.jsonl*"):
        try:
            total += p.read_bytes().count(b"\n")
        except FileNotFoundError:
            continue  # sealed (renamed) between the listing and the read
    return total


def start(job: Path, *args: str, log: Path) -> subprocess.Popen[str]:
    fh = log.open("a")
    return subprocess.Popen(
        [*TOKENMILL, "run", str(job), "--no-live", *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **TEST_ENV},
    )


def kill_when(proc: subprocess.Popen[str], what: str, ready: Any, log: Path) -> None:
    """SIGKILL ``proc`` once ``ready()`` holds (it must still be running then; ``log`` is where it writes)."""
    try:
        wait_for(what, ready, alive=proc, log=log)
    finally:  # no client outlives the test
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def check_records(records: list[dict[str, Any]], ids: list[str]) -> None:
    """Every (id, k) exactly once, each naming its row and sample, with its own recorded seed."""
    assert Counter(r["id"] for r in records) == expected(ids)
    for r in records:
        assert r["id"] == f"{r['primary_id']}_gen{r['sample']}"
        assert r["sampling"]["seed"] == sample_seed(r["primary_id"], r["sample"], None)
        assert r["sampling"]["samples"] == SAMPLES
    by_row: dict[str, set[int]] = {}
    for r in records:
        by_row.setdefault(r["primary_id"], set()).add(r["sampling"]["seed"])
    assert all(len(seeds) == SAMPLES for seeds in by_row.values())
    answers: dict[str, set[str]] = {}  # the simulated server draws its answer from the seed it is sent
    for r in records:
        answers.setdefault(r["primary_id"], set()).add(r["completion"])
    assert sum(len(a) == SAMPLES for a in answers.values()) >= 0.9 * len(ids)


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "16"])], indirect=True)
def test_three_samples_survive_sigkills_exactly_once_and_export_both_ways(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    ids = write_rows(tmp_path / "in.jsonl", 200)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml",
        [s.url for s in fleet],
        tmp_path / "in.jsonl",
        out,
        samples=SAMPLES,
        concurrency=12,
        output={"shard_size": 40},
    )
    log = tmp_path / "run.log"
    for target in (90, 300):  # two kills: mid-shard and after a few seals
        proc = start(job, log=log)
        kill_when(proc, f"{target} records", lambda t=target: out.exists() and records_so_far(out) >= t, log)
        done, failed = read_records(out)
        assert not [i for i, c in Counter(r["id"] for r in done + failed).items() if c > 1], "recorded twice"
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    done, failed = read_records(out)
    assert not failed
    check_records(done, ids)
    verify = run_cli("verify", str(out), "--input", str(job))
    assert verify.returncode == 0, verify.stdout
    assert f"samples        {len(ids)} rows x {SAMPLES}: 0 with fewer than {SAMPLES} answers" in verify.stdout

    answers = tmp_path / "answers.jsonl"
    res = run_cli("export", str(out), "--format", "sharegpt", "--to", str(answers))
    assert res.returncode == 0, res.stderr
    rows = [orjson.loads(line) for line in answers.read_bytes().splitlines()]
    assert Counter(r["id"] for r in rows) == expected(ids)
    assert all(r["id"] == f"{r['primary_id']}_gen{r['sample']}" for r in rows)

    grouped = tmp_path / "grouped.jsonl"
    res = run_cli("export", str(out), "--format", "openai-messages", "--samples", "grouped", "--to", str(grouped))
    assert res.returncode == 0, res.stderr
    groups = [orjson.loads(line) for line in grouped.read_bytes().splitlines()]
    assert sorted(g["id"] for g in groups) == sorted(ids)  # one row per prompt
    assert all([a["sample"] for a in g["answers"]] == list(range(SAMPLES)) for g in groups)
    assert all({a["primary_id"] for a in g["answers"]} == {g["id"]} for g in groups)
    counts = orjson.loads((tmp_path / "grouped.jsonl.counts.json").read_bytes())
    assert (counts["groups"], counts["incomplete_groups"], counts["written"]) == (len(ids), 0, len(ids) * SAMPLES)


def remote_records(s3: S3) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in s3.objects(PREFIX):
        if key[len(PREFIX) :].startswith("completions_"):
            out += [orjson.loads(line) for line in s3.get(key).splitlines()]
    return out


def uploaded_shards(s3: S3) -> int:
    try:
        return sum(1 for k in s3.objects(PREFIX) if k[len(PREFIX) :].startswith("completions_"))
    except Exception:
        return 0


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "8"])], indirect=True)
def test_three_samples_survive_the_loss_of_the_machine_exactly_once(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    ids = write_rows(tmp_path / "in.jsonl", 150)
    out = tmp_path / "node" / "out"
    output = {
        "shard_size": 20,
        "remote": s3.url(PREFIX),
        "storage_options": s3.options(),
        "upload": {
            "backoff_base_s": 0.05,
            "backoff_max_s": 0.5,
            "drain_timeout_s": 60,
            "start_wait_s": 10,
            "manifest_interval_s": 0.5,
            "side_interval_s": 0.5,
        },
    }
    job = write_job(
        tmp_path / "job.yaml", [s.url for s in fleet], tmp_path / "in.jsonl", out, samples=SAMPLES, output=output
    )
    log = tmp_path / "run.log"
    proc = start(job, "--concurrency", "4", log=log)
    kill_when(proc, "three shards uploaded", lambda: uploaded_shards(s3) >= 3, log)
    shutil.rmtree(out.parent)  # the machine is gone, with its disk
    again = start(job, log=log)
    assert again.wait(180) == 0, log.read_text()[-3000:]
    assert "took over from" in log.read_text()
    check_records(remote_records(s3), ids)  # exactly once per (id, k), every shard at the prefix
    res = run_cli("verify", "--remote", "--input", str(job), timeout=120, env=TEST_ENV)
    assert res.returncode == 0, res.stdout
    assert f"{len(ids)} rows x {SAMPLES}: 0 with fewer" in res.stdout
    res = run_cli("verify", str(out), "--input", str(job), "--remote", timeout=120, env=TEST_ENV)
    assert res.returncode == 0, res.stdout
