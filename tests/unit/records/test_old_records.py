"""A record written before a cut turn made the record ``length`` (its first turn cut, the record saying its last
turn's ``stop``) is read as ``length`` by ``inspect`` and by every export: the CLI on a real output directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
from click.testing import CliRunner

from tests.helpers.factories import completion
from tokenmill.cli import cli
from tokenmill.output import OutputDir
from tokenmill.quality.signals import signals
from tokenmill.records import Turn

TINY = Path(__file__).resolve().parents[3] / ".cache" / "tiny-model"
USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}]


def _multi(rid: str, first: str) -> Any:
    turns = [
        Turn(text, finish, 5, 7, "http://s", 0.5, quality=signals(text, finish, None).as_dict()).as_dict()
        for text, finish in (("a1", first), ("a2", "stop"))
    ]
    return completion(rid, prompt=USER, completion="a2", finish_reason="stop", turns=turns)


def _old_output(tmp: Path) -> Path:
    """An output directory whose records were written before a cut turn made the record ``length``: the first
    turn cut, the record saying its last turn's ``stop``."""
    out = tmp / "out"
    od = OutputDir(out, shard_size=10)
    od.open()
    od.write(_multi("cut-first", first="length"))
    od.write(_multi("whole", first="stop"))
    od.close(seal=True)
    return out


def test_a_record_written_before_says_length_in_inspect_and_every_export(tmp_path: Path) -> None:
    out = _old_output(tmp_path)
    runner = CliRunner()
    seen = runner.invoke(cli, ["inspect", str(out), "--json"])
    assert seen.exit_code == 0, seen.output
    report = orjson.loads(seen.output)
    assert report["signals"]["truncated"]["count"] == report["lengths"]["length"]["count"] == 1
    for extra in ([], ["--per-turn"]):
        dest = tmp_path / f"tokens{len(extra)}.jsonl"
        args = ["export", str(out), "--format", "tokens", "--tokenizer", str(TINY), "--to", str(dest), *extra]
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
        rows = {r["id"]: r["finish_reason"] for r in map(orjson.loads, dest.read_bytes().splitlines())}
        if extra:
            assert rows == {"cut-first_turn0": "length", "cut-first_turn1": "stop", "whole_turn0": "stop",
                            "whole_turn1": "stop"}  # fmt: skip
        else:
            assert rows == {"cut-first": "length", "whole": "stop"}
    table = tmp_path / "t.parquet"
    assert runner.invoke(cli, ["export", str(out), "--format", "parquet", "--to", str(table)]).exit_code == 0
    assert {r["id"]: r["finish_reason"] for r in pq.read_table(table).to_pylist()} == {
        "cut-first": "length",
        "whole": "stop",
    }
