"""``tokenmill verify OUT [--input JOB.yaml] [--json]``: report, exit status, the job's input as reference."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tests.helpers import factories
from tokenmill.cli import cli, main
from tokenmill.output import OutputDir
from tokenmill.records import Completion


def completion(pid: str) -> Completion:
    return factories.completion(pid, completion="a")


def make_out(root: Path, ids: list[str]) -> Path:
    out = OutputDir(root, shard_size=2)
    out.open()
    for pid in ids:
        out.write(completion(pid))
    out.close(seal=True)
    return root


def make_job(tmp_path: Path, rows: list[bytes]) -> Path:
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b"\n".join(rows) + b"\n")
    job = tmp_path / "job.yaml"
    job.write_text(
        f"input:\n  path: {data}\n  on_bad_row: skip\n"
        f"servers: [http://127.0.0.1:1]\noutput:\n  dir: {tmp_path / 'out'}\n"
    )
    return job


def test_ok_directory_exits_0_with_a_summary(tmp_path: Path) -> None:
    out = make_out(tmp_path / "out", ["a", "b", "c"])
    result = CliRunner().invoke(cli, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    assert "sealed shards  2 (3 completions" in result.output
    assert "OK: every sealed shard matches the manifest" in result.output


def test_a_problem_exits_1_and_is_listed(tmp_path: Path) -> None:
    out = make_out(tmp_path / "out", ["a", "b"])
    shard = out / "completions_000000.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b'"a"', b'"x"', 1))
    result = CliRunner().invoke(cli, ["verify", str(out)])
    assert result.exit_code == 1
    assert "NOT OK: 1 problem" in result.output
    assert "completions_000000.jsonl: differs from its manifest line in sha256" in result.output


def test_json_output(tmp_path: Path) -> None:
    out = make_out(tmp_path / "out", ["a"])
    result = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert result.exit_code == 0
    data = orjson.loads(result.output)
    assert data["ok"] is True
    assert data["counts"]["sealed_records"] == 1


def test_input_from_the_job_file_checks_every_prompt(tmp_path: Path) -> None:
    rows = [b'{"prompt": "one"}', b'{"prompt": "two"}', b"not json", b'{"prompt": "four"}']
    job = make_job(tmp_path, rows)
    # ids are row indexes; row 2 is skipped by the input; row 3 was never generated
    out = make_out(tmp_path / "out", ["0", "1"])
    result = CliRunner().invoke(cli, ["verify", str(out), "--input", str(job), "--json"])
    assert result.exit_code == 1, result.output
    data = orjson.loads(result.output)
    assert data["counts"]["input_ids"] == 3
    assert data["counts"]["input_skipped"] == 1
    assert data["problem_totals"] == {"missing": 1}
    assert data["problems"][0]["detail"] == "id '3'"

    writer = OutputDir(out, shard_size=2)
    writer.open()
    writer.write(completion("3"))
    writer.close(seal=True)
    result = CliRunner().invoke(cli, ["verify", str(out), "--input", str(job)])
    assert result.exit_code == 0, result.output
    assert "every input id is accounted for" in result.output


def test_a_missing_directory_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["tokenmill", "verify", str(tmp_path / "nope")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "is not an output directory" in err
    assert "Traceback" not in err
