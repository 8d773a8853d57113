"""What ``--allow-changed-job`` may change, through the whole CLI on a ``file://`` prefix: how completions are made
(here the sampling), never the input: another input is refused in the directory and at the prefix that hold the
first input's records, with the flag too, and the refusal lists what differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess


def listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_allow_changed_job_never_lets_another_input_into_the_prefix(fleet: list[SimProcess], tmp_path: Path) -> None:
    first, other = write_prompts(tmp_path / "a.jsonl", 40), write_prompts(tmp_path / "b.jsonl", 40, start=500)
    remote = tmp_path / "remote"
    out = tmp_path / "out"
    output = {"remote": remote.as_uri() + "/"}
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], first, out, output=output)
    assert run_cli("run", str(job), "--no-live").returncode == 0
    before = listing(remote)

    changed = write_job(tmp_path / "b.yaml", [fleet[0].url], other, out, output=output)
    plain = run_cli("run", str(changed), "--no-live")
    assert plain.returncode == 2, plain.stderr
    forced = run_cli("run", str(changed), "--no-live", "--allow-changed-job")
    assert forced.returncode == 2, forced.stderr
    said = f"holds the records of another input (input.path '{first}' -> '{other}')"
    assert said in plain.stderr and said in forced.stderr
    assert "not even with --allow-changed-job (which may change api, model, sampling" in forced.stderr
    fresh = write_job(tmp_path / "c.yaml", [fleet[0].url], other, tmp_path / "fresh", output=output)
    elsewhere = run_cli("run", str(fresh), "--no-live", "--allow-changed-job")  # a new directory, the same prefix
    assert elsewhere.returncode == 2, elsewhere.stderr
    assert f"{remote.as_uri()}/ holds the records of another input" in elsewhere.stderr
    assert listing(remote) == before  # not one object written, replaced or removed
    assert sorted(r["id"] for r in read_records(out)[0]) == [f"p{i:05d}" for i in range(40)]

    sampling = write_job(tmp_path / "d.yaml", [fleet[0].url], first, out, output=output, sampling={"max_tokens": 32})
    refused = run_cli("run", str(sampling), "--no-live")
    assert refused.returncode == 2 and "pass --allow-changed-job if this is intended (it may change" in refused.stderr
    allowed = run_cli("run", str(sampling), "--no-live", "--allow-changed-job")
    assert allowed.returncode == 0, allowed.stderr  # the same input: carried on (nothing new to do)
