"""Where a run writes (tokenmill.run.target): the job's own output and prefix, or a trial run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenmill.config import JobSpec, load_job
from tokenmill.errors import ConfigError
from tokenmill.run.target import AsWritten, decide_target

REMOTE = "s3://bucket/corpora/run-1/"


def job_file(tmp: Path, remote: str | None = REMOTE, **inp: Any) -> Path:
    output: dict[str, Any] = {"dir": str(tmp / "out")}
    if remote:
        output["remote"] = remote
    data = {"input": {"path": str(tmp / "in.jsonl"), **inp}, "servers": ["http://127.0.0.1:1"], "output": output}
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def target_of(path: Path, overrides: dict[str, Any] | None = None, **asked: Any) -> Any:
    job = load_job(path, overrides)
    return job, decide_target(job, AsWritten.read(path), **asked)


def test_the_job_as_written_is_no_trial_and_uploads_to_its_prefix(tmp_path: Path) -> None:
    path = job_file(tmp_path, limit=1000)  # the file's own cut defines the job: no trial
    job, target = target_of(path, {"input.limit": 1000, "output.dir": str(tmp_path / "x" / ".." / "out")})
    assert not target.is_trial and target.remote == REMOTE and target.success
    assert target.apply(job) is job
    assert target.line() == f"writing to {tmp_path / 'x' / '..' / 'out'}, uploading to {REMOTE} (output.remote)"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"input.limit": 100}, "--limit 100"),
        ({"input.offset": 50}, "--offset 50"),
        ({"output.dir": "trial/"}, "-o trial/ is not the job's output.dir"),
    ],
)
def test_a_cut_input_or_another_directory_is_a_trial_that_uploads_nowhere(
    tmp_path: Path, overrides: dict[str, Any], why: str
) -> None:
    job, target = target_of(job_file(tmp_path), overrides)
    assert target.is_trial and target.remote is None and why in target.trial[0]
    applied = target.apply(job)
    assert applied.output.remote is None and applied.output.dir == job.output.dir
    assert job.output.remote == REMOTE  # the job itself is not changed
    line = target.line()
    assert line.startswith(f"trial run ({why}") and "no upload (trial run: the job's output.remote" in line
    assert "--remote URL" in line and "--upload" in line


def test_a_trial_of_a_job_without_a_prefix_says_so(tmp_path: Path) -> None:
    _, target = target_of(job_file(tmp_path, remote=None), {"input.limit": 5})
    assert target.line().endswith("no upload (output.remote is not set)")


def test_a_trial_uploads_to_a_prefix_of_its_own_with_its_own_success(tmp_path: Path) -> None:
    job, target = target_of(job_file(tmp_path), {"input.limit": 100}, remote="s3://bucket/trials/t1/")
    assert target.remote == "s3://bucket/trials/t1/" and target.success
    assert target.apply(job).output.remote == "s3://bucket/trials/t1/"
    assert "uploading to s3://bucket/trials/t1/ (--remote: a prefix of its own, with its own _SUCCESS)" in target.line()


def test_a_cut_trial_sent_to_the_jobs_prefix_never_writes_its_success(tmp_path: Path) -> None:
    _, cut = target_of(job_file(tmp_path), {"input.limit": 100}, upload=True)
    assert cut.remote == REMOTE and not cut.success
    assert "the input is cut, so its _SUCCESS is left to a run of the whole input" in cut.line()
    _, named = target_of(job_file(tmp_path), {"input.limit": 100}, remote=REMOTE.rstrip("/"))  # the same prefix
    assert named.remote == REMOTE and not named.success and named.via == "--upload"
    _, moved = target_of(job_file(tmp_path), {"output.dir": str(tmp_path / "elsewhere")}, upload=True)
    assert moved.remote == REMOTE and moved.success  # the whole input, from another directory


def test_asking_for_an_upload_that_cannot_be_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the job file sets none: give --remote URL"):
        target_of(job_file(tmp_path, remote=None), {"input.limit": 5}, upload=True)
    with pytest.raises(ConfigError, match="not both"):
        target_of(job_file(tmp_path), {"input.limit": 5}, upload=True, remote="s3://b/t/")


def test_a_job_run_as_it_is_writes_where_it_says(tmp_path: Path) -> None:
    job = JobSpec.model_validate(
        {"input": {"path": "x", "limit": 3}, "servers": ["http://h:1"], "output": {"dir": "o", "remote": REMOTE}}
    )
    target = decide_target(job)  # demo, regeneration rounds, partitions' clients: no file to compare with
    assert not target.is_trial and target.remote == REMOTE and target.success
