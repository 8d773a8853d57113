"""What a record says, read back by every command, against simulated servers: a conversation cut at max_tokens in
any turn is ``length`` in the record, ``inspect`` and every export row (each turn keeps its own), and integer ids
stay integers from the input to the record to the export, while resume keys them as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import SimProcess

TINY = Path(__file__).resolve().parents[2] / ".cache" / "tiny-model"
MAX_TOKENS = 64
ROWS = 40
FIRST_ID = 1000000


def _conversations(path: Path, ids: list[int | str]) -> Path:
    """ShareGPT rows of two user turns each, with the given ids."""
    with path.open("wb") as f:
        for rid in ids:
            turns = [
                {"from": "human", "value": f"first question of {rid}"},
                {"from": "gpt", "value": "old answer"},
                {"from": "human", "value": f"second question of {rid}"},
            ]
            f.write(orjson.dumps({"id": rid, "conversations": turns}) + b"\n")
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


# answers log-normal around max_tokens: about half the turns are cut, first turns and last turns alike
CUTTING = [(1, ["--instant", "--output-len-mean", str(MAX_TOKENS), "--output-len-sigma", "0.8"])]


@pytest.mark.parametrize("fleet", CUTTING, indirect=True)
def test_a_turn_cut_at_max_tokens_makes_the_conversation_length_everywhere(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    ids: list[int | str] = [FIRST_ID + i for i in range(ROWS)]
    data = _conversations(tmp_path / "convs.jsonl", ids)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, sampling={"max_tokens": MAX_TOKENS})
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, _ = read_records(out)
    assert len(done) == ROWS and all(len(r["turns"]) == 2 for r in done)
    cut = {r["id"] for r in done if any(t["finish_reason"] == "length" for t in r["turns"])}
    first_only = [r for r in done if [t["finish_reason"] for t in r["turns"]] == ["length", "stop"]]
    assert first_only, "the servers cut no first turn alone: the test shows nothing"
    assert {r["id"] for r in done if r["finish_reason"] == "length"} == cut  # the record: any turn cut
    assert all(r["turns"][1]["finish_reason"] == "stop" for r in first_only)  # each turn keeps its own

    # inspect: the finish table agrees with the truncated signal
    seen = run_cli("inspect", str(out), "--json")
    assert seen.returncode == 0, seen.stderr
    report = orjson.loads(seen.stdout)
    assert report["signals"]["truncated"]["count"] == len(cut)
    assert report["lengths"]["length"]["count"] == len(cut)
    table = {line.split()[0]: line.split()[1] for line in run_cli("inspect", str(out)).stdout.splitlines() if line}
    assert table["truncated"] == table["length"] == str(len(cut))  # the signal's row and the finish table's

    # the token export: a whole conversation's row is length when any turn was cut; a turn's row is its own
    whole, per_turn = tmp_path / "whole.jsonl", tmp_path / "turns.jsonl"
    for dest, extra in ((whole, []), (per_turn, ["--per-turn"])):
        res = run_cli("export", str(out), "--format", "tokens", "--tokenizer", str(TINY), "--to", str(dest), *extra)
        assert res.returncode == 0, res.stderr
    rows = {r["id"]: r for r in _lines(whole)}
    assert {rid for rid, r in rows.items() if r["finish_reason"] == "length"} == cut
    turn_rows = {(r["primary_id"], r["turn"]): r["finish_reason"] for r in _lines(per_turn)}
    assert turn_rows == {(r["id"], k): t["finish_reason"] for r in done for k, t in enumerate(r["turns"])}

    # the parquet table says the same
    parquet = tmp_path / "train.parquet"
    res = run_cli("export", str(out), "--format", "parquet", "--to", str(parquet))
    assert res.returncode == 0, res.stderr
    got = pq.read_table(parquet).to_pylist()
    assert {int(r["id"]) for r in got if r["finish_reason"] == "length"} == cut


@pytest.mark.parametrize("fleet", [(1, ["--instant"])], indirect=True)
def test_integer_ids_stay_integers_and_resume_keys_them_as_the_strings_written_before(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    numbers = [FIRST_ID + i for i in range(ROWS)]
    data = tmp_path / "convs.jsonl"
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out)
    spec = yaml.safe_load(job.read_text())

    # an output written with string ids (as earlier versions wrote integer ids), then the same ids as integers
    _conversations(data, [str(n) for n in numbers])
    spec["input"]["limit"] = 10
    job.write_text(yaml.safe_dump(spec))
    assert (res := run_cli("run", str(job), "--no-live")).returncode == 0, res.stderr
    _conversations(data, list(numbers))
    spec["input"]["limit"] = 25  # resumes over string-id shards: 15 more
    job.write_text(yaml.safe_dump(spec))
    assert (res := run_cli("run", str(job), "--no-live")).returncode == 0, res.stderr
    del spec["input"]["limit"]  # resumes over integer-id shards too: the rest
    job.write_text(yaml.safe_dump(spec))
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr

    done, _ = read_records(out)
    assert sorted(int(r["id"]) for r in done) == numbers  # each prompt answered exactly once
    assert sorted(r["id"] for r in done if isinstance(r["id"], str)) == [str(n) for n in numbers[:10]]
    assert all(isinstance(r["id"], int) for r in done if int(r["id"]) >= numbers[10])
    check = run_cli("verify", str(out), "--input", str(job))
    assert check.returncode == 0, check.stdout + check.stderr

    # the exports keep each id as its record wrote it
    dest = tmp_path / "train.jsonl"
    assert (res := run_cli("export", str(out), "--format", "sharegpt", "--to", str(dest))).returncode == 0, res.stderr
    assert sorted((type(r["id"]).__name__, r["id"]) for r in _lines(dest)) == sorted(
        (type(r["id"]).__name__, r["id"]) for r in done
    )
    turns = tmp_path / "turns.jsonl"
    res = run_cli("export", str(out), "--format", "tokens", "--tokenizer", str(TINY), "--per-turn", "--to", str(turns))
    assert res.returncode == 0, res.stderr
    last = numbers[-1]
    assert {(r["id"], r["primary_id"]) for r in _lines(turns) if r["primary_id"] == last} == {
        (f"{last}_turn0", last),
        (f"{last}_turn1", last),
    }
