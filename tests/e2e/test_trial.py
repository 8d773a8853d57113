"""Trial runs next to a production prefix (moto's S3 server on loopback): they never touch it unless told where to
upload; the job's ``_SUCCESS`` is written once, by the run that finishes the whole job, and a finished job whose
input grew is reopened only on request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.helpers.cli import run_cli, write_job, write_prompts
from tests.helpers.s3server import S3, TEST_ENV
from tokenmill.fleet.simprocs import SimProcess

PREFIX = "corpora/sharegpt/run-1/"
TRIALS = "corpora/trials/t1/"
FAST_UPLOAD = {"backoff_base_s": 0.05, "backoff_max_s": 0.5, "drain_timeout_s": 60, "start_wait_s": 10}


def production_job(tmp: Path, fleet: list[SimProcess], s3: S3, n: int) -> tuple[Path, Path, Path]:
    data = write_prompts(tmp / "in.jsonl", n)
    out = tmp / "out"
    output = {"shard_size": 50, "remote": s3.url(PREFIX), "storage_options": s3.options(), "upload": FAST_UPLOAD}
    return write_job(tmp / "job.yaml", [s.url for s in fleet], data, out, output=output), out, data


def run(*args: str) -> Any:
    return run_cli(*args, timeout=180, env=TEST_ENV)


def objects(s3: S3, prefix: str) -> dict[str, str]:
    """Every object under ``prefix`` with its ETag: the same dict means nothing was written, replaced or removed."""
    out: dict[str, str] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = str(obj["ETag"])
    return out


def success(s3: S3, prefix: str = PREFIX) -> dict[str, Any]:
    return dict(orjson.loads(s3.get(prefix + "_SUCCESS")))


def test_trial_runs_leave_the_production_prefix_untouched_and_success_is_written_once(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    job, out, _ = production_job(tmp_path, fleet, s3, 160)
    trial = tmp_path / "trial"
    first = run("run", str(job), "--limit", "30", "-o", str(trial), "--no-live")  # the README's trial run
    assert first.returncode == 0, first.stderr
    assert objects(s3, PREFIX) == {}  # no claim, no shard, no _SUCCESS
    assert f"trial run (--limit 30; -o {trial} is not the job's output.dir {out})" in first.stderr
    assert f"writing to {trial}; no upload (trial run: the job's output.remote s3://" in first.stderr
    assert len(list(trial.glob("completions_*.jsonl"))) == 1
    cut = run("run", str(job), "--limit", "30", "--no-live")  # a trial into the job's own directory
    assert cut.returncode == 0, cut.stderr
    assert "trial run (--limit 30)" in cut.stderr and objects(s3, PREFIX) == {}

    full = run("run", str(job), "--no-live")
    assert full.returncode == 0, full.stderr
    assert f"writing to {out}, uploading to s3://{s3.bucket}/{PREFIX} (output.remote)" in full.stderr
    assert (success(s3)["completions"], success(s3)["shards"]) == (160, 4)  # the trial's 30 records are among them
    done = objects(s3, PREFIX)
    marker = done[PREFIX + "_SUCCESS"]

    again = run("run", str(job), "--no-live")  # a finished job, nothing new: _SUCCESS is the same object
    assert again.returncode == 0, again.stderr
    assert "_SUCCESS there since an earlier run (untouched)" in again.stderr
    assert objects(s3, PREFIX)[PREFIX + "_SUCCESS"] == marker
    for trial_args in (["--limit", "30"], ["--offset", "100", "--limit", "30"], ["-o", str(tmp_path / "other")]):
        before = objects(s3, PREFIX)
        res = run("run", str(job), *trial_args, "--no-live")
        assert res.returncode == 0, res.stderr
        assert "no upload (trial run" in res.stderr
        assert objects(s3, PREFIX) == before  # not a byte of the prefix changes: claim, shards, _SUCCESS
    assert objects(s3, PREFIX)[PREFIX + "_SUCCESS"] == marker
    ok = run_cli("verify", "--remote", "--input", str(job), timeout=120, env=TEST_ENV)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_trial_asked_to_upload_goes_where_it_was_told(fleet: list[SimProcess], s3: S3, tmp_path: Path) -> None:
    job, out, _ = production_job(tmp_path, fleet, s3, 120)
    own = run("run", str(job), "--limit", "30", "-o", str(tmp_path / "trial"), "--remote", s3.url(TRIALS), "--no-live")
    assert own.returncode == 0, own.stderr
    assert f"uploading to s3://{s3.bucket}/{TRIALS} (--remote: a prefix of its own" in own.stderr
    assert success(s3, TRIALS)["completions"] == 30  # the trial is a whole job at its own prefix
    assert objects(s3, PREFIX) == {}

    chunk = run("run", str(job), "--limit", "60", "--upload", "--no-live")  # the job's prefix, asked for
    assert chunk.returncode == 0, chunk.stderr
    assert "(--upload: the job's output.remote; the input is cut, so its _SUCCESS is left to a run" in chunk.stderr
    names = {k[len(PREFIX) :] for k in objects(s3, PREFIX)}
    assert {"_tokenmill_manifest.json", "completions_000000.jsonl", "completions_000001.jsonl"} <= names
    assert "_SUCCESS" not in names  # 60 of 120 rows: the job is not done
    full = run("run", str(job), "--no-live")
    assert full.returncode == 0, full.stderr
    assert success(s3)["completions"] == 120
    assert sorted(p.name for p in out.glob("completions_*.jsonl")) == [f"completions_00000{i}.jsonl" for i in range(4)]


def test_a_finished_job_whose_input_grew_is_reopened_only_when_asked(
    fleet: list[SimProcess], s3: S3, tmp_path: Path
) -> None:
    job, out, data = production_job(tmp_path, fleet, s3, 100)
    assert run("run", str(job), "--no-live").returncode == 0
    finished = objects(s3, PREFIX)
    with data.open("a") as fh:  # 30 more prompts
        fh.write(write_prompts(tmp_path / "more.jsonl", 30, start=100).read_text())
    refused = run("run", str(job), "--no-live")
    assert refused.returncode == 2, refused.stderr
    assert "says this job is finished, but the input holds prompts its records do not" in refused.stderr
    assert "the job's input grew" in refused.stderr and "rerun with --reopen" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert objects(s3, PREFIX) == finished  # nothing generated, nothing uploaded, _SUCCESS as it was
    assert len(list(out.glob("completions_*.jsonl"))) == 2

    reopened = run("run", str(job), "--reopen", "--no-live")
    assert reopened.returncode == 0, reopened.stderr
    assert "REOPENING the finished job" in reopened.stderr and "REOPENED the finished job" in reopened.stderr
    assert success(s3)["completions"] == 130
    events = [orjson.loads(line) for line in (out / "events.jsonl").read_bytes().splitlines()]
    assert [e["reason"] for e in events if e["kind"] == "reopen"] == ["--reopen"]
    ok = run_cli("verify", "--remote", "--input", str(job), timeout=120, env=TEST_ENV)
    assert ok.returncode == 0, ok.stdout + ok.stderr
