"""Formats, file expansion and ordering, stable ids, offset/limit, row counts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import InputSpec
from tokenmill.records import Prompt, Skip
from tokenmill.sources import count_rows, iter_prompts


def _write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return path


def _prompts(**spec: object) -> list[Prompt]:
    items = list(iter_prompts(InputSpec.model_validate(spec)))
    assert all(isinstance(i, Prompt) for i in items), items
    return [i for i in items if isinstance(i, Prompt)]


def _ids_texts(prompts: list[Prompt]) -> list[tuple[str, str | None]]:
    return [(p.id, p.text) for p in prompts]


def test_jsonl_rows_get_line_sources_and_index_ids(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\r\n{"prompt": "c"}')  # blank line, CRLF, no final newline
    prompts = _prompts(path=str(path))
    assert [(p.id, p.text, p.source) for p in prompts] == [
        ("0", "a", f"{path}:1"),
        ("1", "b", f"{path}:3"),
        ("2", "c", f"{path}:4"),
    ]
    assert all(p.messages is None and p.meta is None for p in prompts)


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n{"prompt": "b"}\n')
    assert _ids_texts(_prompts(path=str(path))) == [("0", "a"), ("1", "b")]


def test_json_array_file_is_streamed_element_by_element(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    rows = [{"prompt": f"text {i} " + "x" * (i * 997 % 5000)} for i in range(600)]  # ~1.5 MB: several chunks
    path.write_text(json.dumps(rows, indent=1))
    prompts = _prompts(path=str(path))
    assert [p.text for p in prompts] == [r["prompt"] for r in rows]
    assert prompts[1].source == f"{path}:5 (item 1)"  # indent=1: "[", "{", '"prompt"', "}," then row 1


def test_json_array_numbers_cut_by_the_chunk_boundary_stay_whole(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    pad = " " * ((1 << 20) - len('[{"prompt": "a", "n": ') - 2)
    path.write_text('[{"prompt": "a", "n": ' + pad + "123456789}]")  # the number straddles the 1 MiB mark
    prompts = _prompts(path=str(path), mapping="prompt")
    assert prompts[0].text == "a"


def test_json_file_holding_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    assert _ids_texts(_prompts(path=str(path))) == [("0", "a"), ("1", "b")]


def test_parquet_rows_and_row_sources(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": [f"p{i}" for i in range(2500)], "uid": list(range(2500))}), path)
    prompts = _prompts(path=str(path), id_field="uid")
    assert len(prompts) == 2500
    assert (prompts[0].id, prompts[0].text, prompts[0].source) == ("0", "p0", f"{path}:row 0")
    assert (prompts[2499].id, prompts[2499].source) == ("2499", f"{path}:row 2499")


def test_parquet_offset_skips_whole_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": [f"p{i}" for i in range(1000)]}), path, row_group_size=100)
    prompts = _prompts(path=str(path), offset=250, limit=3)
    assert [(p.id, p.text, p.source) for p in prompts] == [
        ("250", "p250", f"{path}:row 250"),
        ("251", "p251", f"{path}:row 251"),
        ("252", "p252", f"{path}:row 252"),
    ]


def test_parquet_chat_rows_keep_every_column(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    conv = [[{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]]
    pq.write_table(pa.table({"conversations": conv, "lang": ["en"]}), path)
    (prompt,) = _prompts(path=str(path))
    assert prompt.messages == [{"role": "user", "content": "hi"}]
    assert prompt.meta == {"row": {"conversations": conv[0], "lang": "en"}, "fields": {"lang": "en"}}


def test_directory_and_glob_are_read_in_sorted_order(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "d" / "part-002.jsonl", ["c"])
    _write_jsonl(tmp_path / "d" / "part-000.jsonl", ["a0", "a1"])
    _write_jsonl(tmp_path / "d" / "sub" / "part-001.jsonl", ["b"])  # "part-001" < "sub/": read second
    _write_jsonl(tmp_path / "d" / ".hidden.jsonl", ["never"])
    _write_jsonl(tmp_path / "d" / "_tmp" / "x.jsonl", ["never"])
    (tmp_path / "d" / "README.md").write_text("not data")
    pq.write_table(pa.table({"prompt": ["p"]}), tmp_path / "d" / "part-001.parquet")
    by_dir = _prompts(path=str(tmp_path / "d"))
    assert _ids_texts(by_dir) == [("0", "a0"), ("1", "a1"), ("2", "p"), ("3", "c"), ("4", "b")]
    by_glob = _prompts(path=str(tmp_path / "d" / "**" / "*.jsonl"))  # a glob takes what it matches, "_tmp/" too
    assert _ids_texts(by_glob) == [("0", "never"), ("1", "a0"), ("2", "a1"), ("3", "c"), ("4", "b")]
    only_parquet = _prompts(path=str(tmp_path / "d"), format="parquet")
    assert _ids_texts(only_parquet) == [("0", "p")]


def test_ids_are_stable_across_runs_and_windows(tmp_path: Path) -> None:
    for i in range(3):
        _write_jsonl(tmp_path / f"part-{i}.jsonl", [f"f{i}r{j}" for j in range(4)])
    pattern = str(tmp_path / "part-*.jsonl")
    whole = _ids_texts(_prompts(path=pattern))
    assert whole == _ids_texts(_prompts(path=pattern))
    assert whole[5] == ("5", "f1r1")
    window = _ids_texts(_prompts(path=pattern, offset=3, limit=6))  # crosses two file boundaries
    assert window == whole[3:9]
    assert _ids_texts(_prompts(path=pattern, offset=100)) == []
    assert _ids_texts(_prompts(path=pattern, limit=2)) == whole[:2]


def test_offset_and_limit_count_bad_rows_too(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\nbroken\n{"prompt": "c"}\n{"prompt": "d"}\n')
    items = list(iter_prompts(InputSpec(path=str(path), offset=1, limit=2, on_bad_row="skip")))
    assert [(type(i).__name__, i.id) for i in items] == [("Skip", "1"), ("Prompt", "2")]


def test_limit_stops_reading(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\nnot even json\n')
    assert _ids_texts(_prompts(path=str(path), limit=2)) == [("0", "a"), ("1", "b")]  # line 3 never decoded


def test_explicit_format_overrides_the_extension(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "data.txt", ["a"])
    assert _ids_texts(_prompts(path=str(path), format="jsonl")) == [("0", "a")]


def test_count_rows_honours_the_window(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "a.jsonl", ["x"] * 7)
    (tmp_path / "b.jsonl").write_text('{"prompt": "y"}\n\nnot json\n')  # blank lines are not rows, bad ones are
    pq.write_table(pa.table({"prompt": ["z"] * 5}), tmp_path / "c.parquet")
    (tmp_path / "d.json").write_text(json.dumps([{"prompt": "w"}] * 4))
    assert count_rows(InputSpec(path=str(tmp_path))) == 7 + 2 + 5 + 4
    assert count_rows(InputSpec(path=str(tmp_path), offset=10, limit=5)) == 5
    assert count_rows(InputSpec(path=str(tmp_path), offset=15)) == 3
    assert count_rows(InputSpec(path=str(tmp_path), offset=50)) == 0


@pytest.mark.parametrize("name", ["x.jsonl", "x.ndjson", "x.json", "x.jsonl.gz", "x.parquet"])
def test_auto_format_by_extension(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"prompt": ["a"]}), path)
    elif name.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(b'{"prompt": "a"}\n'))
    else:
        _write_jsonl(path, ["a"])
    items = list(iter_prompts(InputSpec(path=str(path))))
    assert [(type(i), getattr(i, "text", None)) for i in items] == [(Prompt, "a")]
    assert not any(isinstance(i, Skip) for i in items)


def test_json_array_element_larger_than_many_chunks(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    huge = "y" * 5_000_000  # about five 1 MiB chunks in one element
    path.write_text(json.dumps([{"prompt": "small"}, {"prompt": huge}, {"prompt": "after"}]))
    assert [p.text for p in _prompts(path=str(path))] == ["small", huge, "after"]


def test_home_directory_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _write_jsonl(tmp_path / "data" / "p.jsonl", ["a"])
    assert _ids_texts(_prompts(path="~/data/p.jsonl")) == [("0", "a")]
