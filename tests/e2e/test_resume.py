"""SIGKILL the client at random moments, several times in a row; the rerun loses and duplicates nothing."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess

N = 1500


def count_lines(out: Path) -> int:
    """Records written so far; a shard sealed (renamed) between the listing and the read is counted next time."""
    total = 0
    for p in out.glob("completions_*.jsonl*"):
        try:
            total += p.read_bytes().count(b"\n")
        except FileNotFoundError:
            continue
    return total


def reached(out: Path, target: int) -> bool:
    return out.exists() and count_lines(out) >= target


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "32"])], indirect=True)
def test_sigkill_five_times_then_resume_verifies(fleet: list[SimProcess], tmp_path: Path) -> None:
    rng = random.Random(1234)
    data = write_prompts(tmp_path / "in.jsonl", N)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [s.url for s in fleet], data, out, concurrency=24, output={"shard_size": 100}
    )
    kills = 0
    for _ in range(5):
        before = count_lines(out) if out.exists() else 0
        target = before + rng.randint(30, 200)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(f"{target} records", partial(reached, out, target), every_s=0.01, alive=proc)
        finally:  # killed whether the test goes on or fails here: no client outlives the test
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        kills += 1
        done, failed = read_records(out)
        ids = Counter(r["id"] for r in done + failed)
        assert not [i for i, c in ids.items() if c > 1], "a record was duplicated"
    assert kills == 5
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed
    assert Counter(r["id"] for r in done) == Counter(f"p{i:05d}" for i in range(N))
    verify = run_cli("verify", str(out), "--input", str(job))
    assert verify.returncode == 0, verify.stdout + verify.stderr
