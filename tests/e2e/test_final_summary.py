"""The final summary is written after the last upload, through the whole CLI on a ``file://`` prefix: a run whose
last shards were still uploading when generation ended says nothing is waiting once they are up (the printed
table, ``summary.md``, ``summary.json`` and its copy at the prefix)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers.cli import run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_the_summary_after_the_last_upload_shows_no_backlog(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 40)
    out, remote = tmp_path / "out", tmp_path / "remote"
    output = {"shard_size": 1, "remote": remote.as_uri() + "/"}  # a shard a record: uploads trail generation
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, output=output)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert "upload: all 40 shards are at" in res.stderr and "_SUCCESS written" in res.stderr
    assert (remote / "_SUCCESS").exists()
    assert "upload backlog" not in res.stdout
    assert "upload backlog" not in (out / "summary.md").read_text()
    assert orjson.loads((out / "summary.json").read_bytes())["upload"] is None
    copy = orjson.loads((remote / "_tokenmill" / "summary.json").read_bytes())
    assert copy["upload"] is None and copy["completed_total"] == 40
