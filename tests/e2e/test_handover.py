"""The whole corpus reaches the trainer: ``export`` and ``inspect`` of an output directory read every live record
wherever it lives (shards offloaded after upload, taken over from the remote by a fresh machine, other partitions',
regeneration rounds), of a remote prefix alike, and never hand over part of a corpus with exit code 0.

Real parts: simulated servers as processes, moto's S3 server on loopback, the ``tokenmill`` CLI as a user runs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import run_cli, write_job, write_prompts
from tests.helpers.s3server import S3, TEST_ENV
from tokenmill.fleet.simprocs import SimProcess

PREFIX = "corpora/run-1/"
FAST_UPLOAD = {"backoff_base_s": 0.05, "backoff_max_s": 0.5, "drain_timeout_s": 60, "start_wait_s": 10}
N = 240


@pytest.fixture(autouse=True)
def endpoint(s3_server: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint as a user of a prefix URL gives it: in the environment (the job files name it too)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)


def tm(*args: str, timeout: float = 180) -> Any:
    return run_cli(*args, timeout=timeout, env=TEST_ENV)


def job_file(tmp: Path, fleet: list[SimProcess], s3: S3, out: Path, n: int = N, **output: Any) -> Path:
    data = tmp / "in.jsonl"
    if not data.exists():
        write_prompts(data, n)
    spec = {
        "shard_size": 50,
        "remote": s3.url(PREFIX),
        "storage_options": s3.options(),
        "upload": FAST_UPLOAD,
        **output,
    }
    return write_job(tmp / f"job-{out.name}.yaml", [s.url for s in fleet], data, out, output=spec)


def exported(path: Path) -> dict[str, dict[str, Any]]:
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "an id exported twice"
    return by_id


def export(target: str, dest: Path, *extra: str) -> Any:
    res = tm("export", target, "--format", "specforge", "--to", str(dest), *extra)
    return res


def counts(dest: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(dest.with_name(dest.name + ".counts.json").read_bytes())
    return data


def inspected(target: str) -> dict[str, Any]:
    res = tm("inspect", target, "--json")
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = orjson.loads(res.stdout)
    return data


def test_export_after_offload_reads_the_shards_that_live_at_the_remote_only(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job = job_file(tmp_path, fleet, s3, out, delete_after_upload=True)
    res = tm("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert not list(out.glob("completions_*.jsonl"))  # every shard offloaded
    dest = tmp_path / "train.jsonl"
    res = export(str(out), dest)
    assert res.returncode == 0, res.stderr
    assert len(exported(dest)) == N
    got = counts(dest)
    assert got["completed"] == got["written"] == N
    assert got["read_from"] == {f"from {s3.url(PREFIX)}": N}
    assert f"wrote {N:,} of {N:,} completed records" in res.stdout
    assert inspected(str(out))["records"] == N


def test_export_after_a_take_over_and_of_the_prefix_with_its_url_as_written(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job = job_file(tmp_path, fleet, s3, out, n=N)
    assert tm("run", str(job), "--no-live").returncode == 0
    shutil.rmtree(out)  # the machine is lost; a fresh one runs the same job file
    res = tm("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert not list(out.glob("completions_*.jsonl"))  # taken over: the records live at the prefix
    local = tmp_path / "local.jsonl"
    assert export(str(out), local).returncode == 0
    assert len(exported(local)) == N
    remote = tmp_path / "remote.jsonl"
    url = s3.url(PREFIX).rstrip("/")  # as a user may write it
    res = export(url, remote)
    assert res.returncode == 0, res.stderr
    assert exported(remote) == exported(local)
    assert counts(remote)["source"].startswith(url) and "s3:/" + s3.bucket not in res.stdout + res.stderr
    assert inspected(url)["records"] == N


def test_a_completed_record_that_cannot_be_read_fails_the_export_naming_where_it_lives(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job = job_file(tmp_path, fleet, s3, out, delete_after_upload=True)
    assert tm("run", str(job), "--no-live").returncode == 0
    gone = PREFIX + "completions_000002.jsonl"
    s3.client().delete_object(Bucket=s3.bucket, Key=gone)
    dest = tmp_path / "train.jsonl"
    res = export(str(out), dest)
    assert res.returncode != 0
    assert f"s3://{s3.bucket}/{gone}" in res.stderr and "tokenmill verify" in res.stderr
    assert not dest.exists()  # no partial training file
    assert tm("inspect", str(out)).returncode != 0


def test_an_empty_export_is_an_error_unless_asked_for(fleet: list[SimProcess], s3: S3, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = job_file(tmp_path, fleet, s3, out, n=60)
    assert tm("run", str(job), "--no-live").returncode == 0
    dest = tmp_path / "train.jsonl"
    res = export(str(out), dest, "--min-completion-tokens", "100000")
    assert res.returncode != 0 and "every record was left out" in res.stderr and "--allow-empty" in res.stderr
    assert not dest.exists()
    res = export(str(out), dest, "--min-completion-tokens", "100000", "--allow-empty")
    assert res.returncode == 0, res.stderr
    assert dest.read_bytes() == b"" and counts(dest)["left_out"] == {"fewer than 100000 completion tokens": 60}


def test_partitions_on_other_machines_are_read_from_the_prefix(fleet: list[SimProcess], s3: S3, tmp_path: Path) -> None:
    outs = [tmp_path / "node0", tmp_path / "node1"]
    jobs = [job_file(tmp_path, fleet, s3, out) for out in outs]
    for i, job in enumerate(jobs):
        res = tm("run", str(job), "--no-live", "--partition", f"{i}/2")
        assert res.returncode == 0, res.stderr
    mine = {r for r in exported_of(outs[0], tmp_path / "a.jsonl")}
    assert len(mine) == N  # node 0's directory, the whole job: node 1's records from the prefix
    assert exported_of(s3.url(PREFIX), tmp_path / "b.jsonl") == mine


def exported_of(target: str | Path, dest: Path) -> set[str]:
    res = export(str(target), dest)
    assert res.returncode == 0, res.stderr
    return set(exported(dest))


@pytest.mark.parametrize("fleet", [(1, ["--loop-rate", "0.2", "--seed", "3"])], indirect=True)
def test_a_prefix_and_a_downloaded_copy_of_it_export_the_live_answers_of_a_regeneration_round(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job = job_file(tmp_path, fleet, s3, out, n=120)
    assert tm("run", str(job), "--no-live").returncode == 0
    res = tm("regenerate", str(job), "--where", "repetition", "--sampling", "seed=7", "--no-live")
    assert res.returncode == 0, res.stderr
    local = tmp_path / "local.jsonl"
    assert export(str(out), local).returncode == 0
    by_local = exported(local)
    redone = counts(local)["regenerated"]
    assert redone > 0 and len(by_local) == 120
    prefix = tmp_path / "prefix.jsonl"
    assert export(s3.url(PREFIX), prefix).returncode == 0
    assert exported(prefix) == by_local and counts(prefix)["regenerated"] == redone
    copy = tmp_path / "copy"  # the prefix downloaded as it is
    for key in s3.objects(PREFIX):
        path = copy / key[len(PREFIX) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get(key))
    copied = tmp_path / "copied.jsonl"
    res = export(str(copy), copied)
    assert res.returncode == 0, res.stderr
    assert exported(copied) == by_local  # the replaced answers are not shipped
