"""The one JSONL record reader: whole lines of a local file or a remote object's bytes, a bad line named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import OutputError
from tokenmill.output.records_reader import iter_file, iter_jsonl


def test_records_are_read_and_blank_lines_skipped() -> None:
    lines = [b'{"id": "a"}\n', b"\n", b'{"id": "b"}']
    assert [r["id"] for r in iter_jsonl(lines, "s3://b/p/completions_000000.jsonl")] == ["a", "b"]


@pytest.mark.parametrize(("line", "why"), [(b'{"id": \n', "is not valid JSON"), (b'["a list"]\n', "is not a record")])
def test_a_bad_line_is_named_by_where_and_its_number(line: bytes, why: str) -> None:
    with pytest.raises(OutputError, match=f"^s3://b/p/x.jsonl:3 {why}"):
        list(iter_jsonl([b'{"id": "a"}\n', b"\n", line], "s3://b/p/x.jsonl"))


def test_a_file_is_read_to_its_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "completions_000000.jsonl.open"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "c", "comp')  # a write cut short
    assert [r["id"] for r in iter_file(path)] == ["a", "b"]
    assert list(iter_file(tmp_path / "missing.jsonl")) == []
