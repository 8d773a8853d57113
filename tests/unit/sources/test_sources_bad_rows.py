"""Bad rows: every kind, under both policies, with the exact file:line; and errors that are not about a row."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tokenmill.config import InputSpec
from tokenmill.errors import BadRowError, InputError
from tokenmill.records import Prompt, Skip
from tokenmill.sources import iter_prompts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sources"
BAD_ROWS = FIXTURES / "bad_rows.jsonl"

# (line in bad_rows.jsonl, id recorded with the skip, a fragment of the reason)
EXPECTED_SKIPS = [
    (2, None, "not valid JSON (unexpected end of data at column 32)"),
    (3, None, "not valid UTF-8 (byte 0xe9 at column 28)"),
    (4, None, "the row is a JSON array, not an object"),
    (5, "r5", "missing field: the row has none of 'messages', 'conversations', 'prompt'"),
    (6, "r6", "field 'conversations' must be an array of turns, got string"),
    (7, "r7", "empty prompt: field 'prompt' is empty"),
    (8, "r8", "empty conversation: field 'conversations' has no turns"),
    (9, "r9", "conversations[0] has unknown role 'bot'"),
    (10, "r10", "field 'conversations' has no user turn"),
    (11, None, "duplicate id 'r1'"),
    (13, None, "id field 'id' must be a string or an integer, got number"),
    (14, None, "missing id field 'id'"),
    (15, "r15", "conversations[0] must be an object, got string"),
    (16, "r16", "messages[0].content must be a string, got integer"),
]


def _spec(path: Path, **kw: object) -> InputSpec:
    return InputSpec.model_validate({"path": str(path), "id_field": "id", **kw})


def test_skip_policy_records_every_bad_row_with_its_line_and_goes_on() -> None:
    items = list(iter_prompts(_spec(BAD_ROWS, on_bad_row="skip")))
    prompts = [i for i in items if isinstance(i, Prompt)]
    skips = [i for i in items if isinstance(i, Skip)]
    assert [(p.id, p.source) for p in prompts] == [("r1", f"{BAD_ROWS}:1"), ("r17", f"{BAD_ROWS}:17")]
    assert len(skips) == len(EXPECTED_SKIPS)
    for skip, (line, row_id, reason) in zip(skips, EXPECTED_SKIPS, strict=True):
        assert skip.source == f"{BAD_ROWS}:{line}"
        assert skip.id == row_id, skip
        assert reason in skip.reason, skip


@pytest.mark.parametrize(("line", "reason"), [(line, reason) for line, _, reason in EXPECTED_SKIPS])
def test_error_policy_stops_at_the_bad_row(tmp_path: Path, line: int, reason: str) -> None:
    lines = BAD_ROWS.read_bytes().split(b"\n")
    path = tmp_path / "two.jsonl"
    path.write_bytes(lines[0] + b"\n" + lines[line - 1] + b"\n")  # a good row r1, then the bad one
    stream = iter_prompts(_spec(path))
    first = next(stream)
    assert isinstance(first, Prompt) and first.id == "r1"
    with pytest.raises(BadRowError) as caught:
        next(stream)
    err = caught.value
    assert err.source == f"{path}:2"
    assert reason in err.reason
    assert str(err).startswith(f"{path}:2: ")
    assert "--on-bad-row skip" in str(err)


def test_default_ids_let_every_skip_carry_its_row_index(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n{oops\n7\n{"prompt": "b"}\n')
    items = list(iter_prompts(InputSpec(path=str(path), on_bad_row="skip")))
    assert [(type(i).__name__, i.id) for i in items] == [("Prompt", "0"), ("Skip", "1"), ("Skip", "2"), ("Prompt", "3")]


def test_json_array_bad_elements_are_rows_and_syntax_errors_are_fatal(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('[{"prompt": "a"}, 3,\n {"prompt": ""},\n {"prompt": "b"}]')
    items = list(iter_prompts(InputSpec(path=str(path), on_bad_row="skip")))
    assert [i.source for i in items if isinstance(i, Skip)] == [f"{path}:1 (item 1)", f"{path}:2 (item 2)"]
    assert [i.text for i in items if isinstance(i, Prompt)] == ["a", "b"]
    bad = FIXTURES / "bad_array.json"
    with pytest.raises(InputError, match=r"bad_array\.json:4: expected ',' or '\]' after element 2"):
        list(iter_prompts(InputSpec(path=str(bad), on_bad_row="skip")))


def test_json_array_with_bad_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"prompt": "a"},\n{"prompt": "caf\xe9"}]')
    with pytest.raises(InputError, match=r"a\.json:2: not valid UTF-8 \(byte 0xe9\)"):
        list(iter_prompts(InputSpec(path=str(path), on_bad_row="skip")))


def test_parquet_bad_rows_name_the_row(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": ["fine", "", None, "also fine"]}), path)
    items = list(iter_prompts(InputSpec(path=str(path), on_bad_row="skip")))
    skips = [i for i in items if isinstance(i, Skip)]
    assert [s.source for s in skips] == [f"{path}:row 1", f"{path}:row 2"]
    assert skips[0].reason == "empty prompt: field 'prompt' is empty"
    assert skips[1].reason.startswith("missing field: the row has none of 'messages', 'conversations', 'prompt'")
    with pytest.raises(BadRowError, match=r"p\.parquet:row 1: empty prompt"):
        list(iter_prompts(InputSpec(path=str(path))))


def test_missing_path_and_empty_glob_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"does not exist; check the path"):
        list(iter_prompts(InputSpec(path=str(tmp_path / "nope.jsonl"))))
    with pytest.raises(InputError, match=r"matches no files; check the pattern"):
        list(iter_prompts(InputSpec(path=str(tmp_path / "*.jsonl"))))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"holds no data files"):
        list(iter_prompts(InputSpec(path=str(tmp_path))))
    with pytest.raises(InputError, match=r"cannot tell the format of .*notes\.txt.*set input\.format"):
        list(iter_prompts(InputSpec(path=str(tmp_path / "notes.txt"))))
    with pytest.raises(InputError, match=r"is a URL; tokenmill reads local files only"):
        list(iter_prompts(InputSpec(path="s3://bucket/prompts/*.jsonl")))


def test_truncated_gzip_names_the_file_and_line() -> None:
    stream = iter_prompts(InputSpec(path=str(FIXTURES / "truncated.jsonl.gz")))
    with pytest.raises(InputError, match=r"truncated\.jsonl\.gz:\d+: the file cannot be read past this line") as err:
        list(stream)
    assert "truncated or corrupt" in str(err.value)


def test_gzip_jsonl_reads_like_plain_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"prompt": "a"}\n\n{"prompt": "b"}\n'))
    items = list(iter_prompts(InputSpec(path=str(path))))
    assert [(i.id, i.source) for i in items] == [("0", f"{path}:1"), ("1", f"{path}:3")]


def test_parquet_schema_problems_are_input_errors(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"question": ["a"], "uid": ["x"]}), path)
    with pytest.raises(InputError, match=r"has none of the columns .* \(it has: question, uid\); set input\.mapping"):
        list(iter_prompts(InputSpec(path=str(path))))
    with pytest.raises(InputError, match=r"has no column 'prompt' .*; set input\.prompt_field"):
        list(iter_prompts(InputSpec(path=str(path), mapping="prompt")))
    with pytest.raises(InputError, match=r"has no column 'id' .*; set input\.id_field"):
        list(iter_prompts(InputSpec(path=str(path), prompt_field="question", id_field="id")))
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet")
    with pytest.raises(InputError, match=r"junk\.parquet is not a readable Parquet file"):
        list(iter_prompts(InputSpec(path=str(junk))))


def test_empty_input_yields_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n  \n")
    (tmp_path / "empty.json").write_bytes(b"[]")
    assert list(iter_prompts(InputSpec(path=str(tmp_path)))) == []
