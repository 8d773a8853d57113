"""The bad-input catalog, through the whole CLI: every case has a defined behaviour and none prints a traceback.

Row-level problems stop the run naming file:line (exit 2) or, under --on-bad-row skip, are recorded in
skipped.jsonl and the rest completes; input-level problems stop with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import SimProcess

GOOD = [orjson.dumps({"id": f"g{i}", "prompt": f"fine prompt {i}"}) for i in range(3)]

# name -> (bad line placed as line 3 of a jsonl file, words the message must contain)
ROW_CASES: dict[str, tuple[bytes, str]] = {
    "malformed json": (b'{"id": "b", "prompt": "unterminated', "JSON"),
    "wrong type": (orjson.dumps({"id": "b", "prompt": 42}), "string"),
    "missing field": (orjson.dumps({"id": "b", "text": "no prompt field"}), "missing"),
    "non-utf8": (b'{"id": "b", "prompt": "caf\xe9"}', "UTF-8"),
    "empty prompt": (orjson.dumps({"id": "b", "prompt": "   "}), "empty"),
    "empty conversation": (orjson.dumps({"id": "b", "conversations": []}), "empty conversation"),
    "unknown role": (orjson.dumps({"id": "b", "conversations": [{"from": "robot", "value": "hi"}]}), "unknown role"),
    "duplicate id": (orjson.dumps({"id": "g0", "prompt": "again"}), "duplicate"),
    "not an object": (b'["a", "list"]', "object"),
}


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_bad_row(case: str, fleet: list[SimProcess], tmp_path: Path) -> None:
    line, words = ROW_CASES[case]
    data = write_lines(tmp_path / "in.jsonl", [GOOD[0], GOOD[1], line, GOOD[2]])
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert f"{data}:3" in res.stderr and words.lower() in res.stderr.lower(), res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli("run", str(job), "--no-live", "--on-bad-row", "skip")
    assert res.returncode == 0, res.stderr
    done, _ = read_records(out)
    assert sorted(r["id"] for r in done) == ["g0", "g1", "g2"]
    skipped = [orjson.loads(x) for x in (out / "skipped.jsonl").read_bytes().splitlines()]
    assert [s["source"] for s in skipped] == [f"{data}:3"] and words.lower() in skipped[0]["reason"].lower()
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_conversation_ending_with_assistant_turn_is_answered(fleet: list[SimProcess], tmp_path: Path) -> None:
    convo = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "old reply"}]
    data = write_lines(tmp_path / "in.jsonl", [orjson.dumps({"id": "c", "conversations": convo})])
    out = tmp_path / "out"
    res = run_cli("run", str(write_job(tmp_path / "job.yaml", [fleet[0].url], data, out)), "--no-live")
    assert res.returncode == 0, res.stderr
    (rec,) = read_records(out)[0]
    assert rec["prompt"] == [{"role": "user", "content": "hi"}]  # the old reply is not sent
    assert rec["completion"] != "old reply"


def _empty(tmp: Path) -> tuple[dict[str, object], str]:
    (tmp / "empty.jsonl").write_bytes(b"")
    return {"path": str(tmp / "empty.jsonl")}, "no rows"


def _wrong_schema(tmp: Path) -> tuple[dict[str, object], str]:
    pq.write_table(pa.table({"question": ["a"], "n": [1]}), tmp / "bad.parquet")
    return {"path": str(tmp / "bad.parquet"), "mapping": "prompt"}, "question"


def _missing_path(tmp: Path) -> tuple[dict[str, object], str]:
    return {"path": str(tmp / "nothing-*.jsonl")}, "nothing-"


def _unknown_dataset(tmp: Path) -> tuple[dict[str, object], str]:
    return {"hf": {"dataset": "no-such-org/no-such-dataset-xyz"}}, "no-such-org/no-such-dataset-xyz"


INPUT_CASES: dict[str, Callable[[Path], tuple[dict[str, object], str]]] = {
    "empty dataset": _empty,
    "parquet with the wrong schema": _wrong_schema,
    "path matching nothing": _missing_path,
    "dataset id that does not exist": _unknown_dataset,
}


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_bad_input(case: str, tmp_path: Path) -> None:
    spec, words = INPUT_CASES[case](tmp_path)
    job = write_job(tmp_path / "job.yaml", ["http://127.0.0.1:9"], tmp_path / "unused", tmp_path / "out")
    data = yaml.safe_load(job.read_text())
    data["input"] = {**spec, "id_field": None} if "hf" in spec else {**spec}
    job.write_text(yaml.safe_dump(data))
    res = run_cli("run", str(job), "--no-live", env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert words in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
