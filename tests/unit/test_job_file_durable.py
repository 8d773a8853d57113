"""``OUT/job.json`` is written atomically and fsynced: after a machine crash the job id is still there (it owns
the remote prefix; a lost or empty job.json would stop the next start, and a new one would be another job)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tokenmill.config import parse_job
from tokenmill.runner import check_job_identity


def test_job_json_is_fsynced_then_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    job = parse_job({"input": {"path": "in.jsonl"}, "servers": ["http://127.0.0.1:9"], "output": {"dir": "out"}})
    job_id = check_job_identity(tmp_path, job, allow_changed=False)
    assert synced[0] == str(tmp_path / "job.json.tmp"), "the content is durable before the rename"
    assert synced[-1] == str(tmp_path), "the rename is durable (the directory is fsynced)"
    assert orjson.loads((tmp_path / "job.json").read_bytes())["job_id"] == job_id
    assert not (tmp_path / "job.json.tmp").exists()
    assert check_job_identity(tmp_path, job, allow_changed=False) == job_id
