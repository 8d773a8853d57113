"""Surviving the loss of a machine: partitions as separate processes, each with its own local directory and one
remote prefix (moto's S3 server on loopback); a partition, or a single-machine run, whose directory is lost and
that carries on from the remote on a fresh one, exactly once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import run_cli, write_job
from tests.helpers.s3server import S3, TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.sources.partition import partition_of

PREFIX = "corpora/scale-out/run-1/"
UPLOAD = {"backoff_base_s": 0.05, "backoff_max_s": 0.5, "drain_timeout_s": 60, "start_wait_s": 10}
TOKENMILL = [sys.executable, "-m", "tokenmill"]


def write_files(root: Path, files: int, rows: int) -> list[str]:
    """``files`` input files of ``rows`` rows each; ids say which file a row is in."""
    root.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        with (root / f"part-{f:03d}.jsonl").open("wb") as fh:
            for r in range(rows):
                rid = f"f{f:03d}-{r:04d}"
                ids.append(rid)
                fh.write(orjson.dumps({"id": rid, "prompt": f"Say something about {rid}."}) + b"\n")
    return ids


def make_job(tmp: Path, fleet: list[SimProcess], s3: S3, data: Path, **upload: Any) -> Path:
    output = {
        "shard_size": 20,
        "remote": s3.url(PREFIX),
        "storage_options": s3.options(),
        "upload": {**UPLOAD, "manifest_interval_s": 0.5, "side_interval_s": 0.5, **upload},
    }
    return write_job(tmp / "job.yaml", [s.url for s in fleet], data, tmp / "unused", output=output)


def start(job: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [*TOKENMILL, "run", str(job), "--no-live", "-o", str(out), "--upload", *args]  # -o alone: a trial
    out.parent.mkdir(parents=True, exist_ok=True)
    log = (out.parent / f"{out.name}.log").open("w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env={**os.environ, **TEST_ENV})


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> int:
    return proc.wait(timeout)


def remote_shards(s3: S3, tag: str = "") -> list[str]:
    try:
        return [k for k in s3.objects(PREFIX) if k[len(PREFIX) :].startswith(f"completions_{tag}")]
    except Exception:
        return []


def remote_records(s3: S3) -> list[dict[str, Any]]:
    out = []
    for key in remote_shards(s3):
        out += [orjson.loads(line) for line in s3.get(key).splitlines()]
    return out


def verify_prefix(job: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("verify", "--remote", "--input", str(job), "--json", timeout=120, env=TEST_ENV)


def test_three_partitions_with_their_own_directories_make_one_job_at_the_prefix(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    ids = write_files(tmp_path / "data", 12, 25)  # 12 files: whole files go to the 3 partitions
    job = make_job(tmp_path, fleet, s3, tmp_path / "data")
    outs = [tmp_path / f"node-{i}" / "out" for i in range(3)]
    procs = [start(job, out, "--partition", f"{i}/3") for i, out in enumerate(outs)]
    assert [finish(p) for p in procs] == [0, 0, 0], [(o.parent / "out.log").read_text()[-2000:] for o in outs]
    for i, out in enumerate(outs):
        local = sorted(p.name for p in out.glob("completions_*"))
        assert local and all(n.startswith(f"completions_p{i:03d}_") for n in local)  # its own files only
        records = [orjson.loads(line) for n in local for line in (out / n).read_bytes().splitlines()]
        assert {int(r["id"][1:4]) % 3 for r in records} == {i}  # whole files: file f went to partition f mod 3
        assert "whole input files" in (out.parent / "out.log").read_text()
    assert sorted(r["id"] for r in remote_records(s3)) == sorted(ids)
    marker = orjson.loads(s3.get(PREFIX + "_SUCCESS"))
    assert marker["completions"] == len(ids) and marker["shards"] == len(remote_shards(s3))
    assert {k[len(PREFIX) :] for k in s3.objects(PREFIX + "_tokenmill/done.")} == {
        f"_tokenmill/done.p{i:03d}.json" for i in range(3)
    }
    res = verify_prefix(job)
    report = orjson.loads(res.stdout)
    assert res.returncode == 0, report
    assert report["counts"]["sealed_records"] == len(ids) and report["counts"]["missing"] == 0
    for out in outs:  # and each directory against its own part of the prefix
        ok = run_cli("verify", str(out), "--remote", timeout=120, env=TEST_ENV)
        assert ok.returncode == 0, ok.stdout
    # status and report of the whole job from the prefix alone (credentials and endpoint from the environment)
    env = {**TEST_ENV, "AWS_ENDPOINT_URL": s3.endpoint}
    st = run_cli("status", s3.url(PREFIX), "--json", timeout=120, env=env)
    assert st.returncode == 0, st.stderr
    status = orjson.loads(st.stdout)
    assert status["state"] == "finished" and status["completed_total"] == len(ids)
    assert status["completed_this_run"] == len(ids)  # the three partitions' runs, as one job
    page = tmp_path / "whole-job.html"
    rep = run_cli("report", s3.url(PREFIX), "--to", str(page), timeout=180, env=env)
    assert rep.returncode == 0, rep.stderr
    assert page.stat().st_size > 10_000 and (tmp_path / "whole-job" / "throughput.png").exists()


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "8"])], indirect=True)
def test_a_partition_killed_and_its_directory_lost_reruns_on_a_fresh_one_exactly_once(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    ids = write_files(tmp_path / "data", 1, 600)  # one file: ids are hashed to partitions
    job = make_job(tmp_path, fleet, s3, tmp_path / "data" / "part-000.jsonl")
    outs = [tmp_path / f"node-{i}" / "out" for i in range(3)]
    procs = [start(job, out, "--partition", f"{i}/3", "--concurrency", "4") for i, out in enumerate(outs)]
    wait_for(
        "two of partition 1's shards uploaded",
        lambda: len(remote_shards(s3, "p001_")) >= 2,
        alive=procs[1],
        log=outs[1].parent / "out.log",
    )
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    shutil.rmtree(outs[1].parent)  # the machine is gone, with its disk
    fresh = tmp_path / "node-1b" / "out"
    again = start(job, fresh, "--partition", "1/3")
    assert [finish(p) for p in (procs[0], procs[2], again)] == [0, 0, 0], (fresh.parent / "out.log").read_text()
    log = (fresh.parent / "out.log").read_text()
    assert "took over from" in log
    mine = sorted(r["id"] for r in remote_records(s3) if partition_of(r["id"], 3) == 1)
    assert mine == sorted(i for i in ids if partition_of(i, 3) == 1)  # exactly once, across remote and local
    assert sorted(r["id"] for r in remote_records(s3)) == sorted(ids)
    res = verify_prefix(job)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("fleet", [(2, ["--max-running-requests", "8"])], indirect=True)
def test_a_run_whose_directory_is_lost_mid_run_carries_on_from_the_remote(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    ids = write_files(tmp_path / "data", 1, 500)
    job = make_job(tmp_path, fleet, s3, tmp_path / "data" / "part-000.jsonl")
    out = tmp_path / "node" / "out"
    proc = start(job, out, "--concurrency", "4")
    wait_for("three shards uploaded", lambda: len(remote_shards(s3)) >= 3, alive=proc, log=out.parent / "out.log")
    shutil.rmtree(out)  # the disk goes first, then the machine
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {k: s3.get(k) for k in remote_shards(s3)}
    again = start(job, out)
    assert finish(again) == 0, (out.parent / "out.log").read_text()[-3000:]
    assert "took over from" in (out.parent / "out.log").read_text()
    assert all(s3.get(k) == data for k, data in before.items())  # what was up stays as it was
    assert sorted(r["id"] for r in remote_records(s3)) == sorted(ids)  # exactly once
    assert verify_prefix(job).returncode == 0
    res = run_cli("verify", str(out), "--input", str(job), "--remote", timeout=120, env=TEST_ENV)
    assert res.returncode == 0, res.stdout
