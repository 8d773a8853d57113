"""regenerate: all against simulated servers: every user turn answered, resumable, exported for training."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.helpers.cli import read_records, run_cli, write_job
from tests.helpers.export import specforge_valid
from tokenmill.fleet.simprocs import SimProcess


def test_regenerate_all_then_export_specforge(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = tmp_path / "convs.jsonl"
    with data.open("wb") as f:
        for i in range(40):
            turns = [{"from": "system", "value": "You are terse."}] if i % 2 else []
            for k in range(1 + i % 3):
                turns += [{"from": "human", "value": f"question {k} of {i}"}, {"from": "gpt", "value": "old answer"}]
            f.write(orjson.dumps({"id": f"c{i}", "conversations": turns}) + b"\n")
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, regenerate="all")
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed and len(done) == 40
    by_id = {r["id"]: r for r in done}
    for i in range(40):
        rec = by_id[f"c{i}"]
        answers = rec["turns"] or [rec]  # a one-turn conversation is an ordinary record
        assert len(answers) == 1 + i % 3
        assert all(t["completion"] and t["completion"] != "old answer" for t in answers)
        assert rec["completion_tokens"] == sum(t["completion_tokens"] for t in answers)
    dest = tmp_path / "train.jsonl"
    res = run_cli("export", str(out), "--format", "specforge", "--to", str(dest))
    assert res.returncode == 0, res.stderr
    rows = [orjson.loads(line) for line in dest.read_bytes().splitlines()]
    assert len(rows) == 40 and all(specforge_valid(r["conversations"]) for r in rows)
    three = next(r for r in rows if r["id"] == "c2")
    assert [m["role"] for m in three["conversations"]] == ["user", "assistant"] * 3
    assert "wrote 40 of 40 completed records" in res.stdout
