"""A regeneration round closes with the signals it was chosen by: ``regenerate --where truncated`` says how many
live answers were cut at max_tokens before it and after it (it once said "degenerate answers: 0 -> 0")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess


@pytest.mark.parametrize("fleet", [(1, ["--output-len-mean", "64", "--output-len-sigma", "0.3"])], indirect=True)
def test_a_truncated_round_closes_with_the_truncated_counts(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 60)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, sampling={"max_tokens": 16})
    assert run_cli("run", str(job), "--no-live").returncode == 0
    res = run_cli("regenerate", str(job), "--where", "truncated", "--sampling", "max_tokens=512", "--no-live")
    assert res.returncode == 0, res.stderr
    moved = re.search(r"round-001 \(--where truncated\): truncated ([\d,]+) -> ([\d,]+) live answers", res.stdout)
    assert moved is not None, res.stdout
    before, after = (int(g.replace(",", "")) for g in moved.groups())
    assert before >= 50 and after < before / 5  # 64-token answers cut at 16, answered again with room for them
    assert "degenerate answers" not in res.stdout
