"""Export: every format, multi-turn interleaving, reasoning and token ids, filters and their counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from tests.helpers.export import specforge_valid
from tokenmill.errors import ConfigError
from tokenmill.export import ExportOptions, export
from tokenmill.export.conversation import conversation
from tokenmill.output import OutputDir
from tokenmill.records import Completion, Failure

SYSTEM = {"role": "system", "content": "be brief"}


def completion(rid: str, **kw: Any) -> Completion:
    base: dict[str, Any] = {
        "id": rid,
        "prompt": [SYSTEM, {"role": "user", "content": f"question {rid}"}],
        "completion": f"answer {rid}",
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "model": "m",
        "sampling": {},
        "server": "http://s",
        "latency_s": 0.1,
        "attempts": 1,
        "started_at": 0.0,
        "finished_at": 1.0,
    }
    base.update(kw)
    return Completion(**base)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    root = tmp_path / "out"
    od = OutputDir(root, shard_size=2)
    od.open()
    od.write(completion("a", reasoning_content="thinking a", prompt_token_ids=[1, 2], completion_token_ids=[3, 4]))
    od.write(completion("b", finish_reason="length", completion_tokens=512))
    od.write(completion("t", prompt="plain text prompt", completion_tokens=5))
    od.write(
        completion(
            "multi",
            prompt=[SYSTEM, {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}],
            completion="a2",
            completion_tokens=7,
            turns=[
                {"completion": "a1", "finish_reason": "stop", "reasoning_content": "r1", "completion_tokens": 3},
                {"completion": "a2", "finish_reason": "stop", "completion_tokens": 4},
            ],
        )
    )
    od.write(completion("empty", completion="   "))
    od.fail(Failure("f", "x", "PermanentError", "HTTP 400: too long", 400, "http://s", 1, 1.0))
    od.close(seal=False)  # leave an open shard: its whole lines are exported too
    return root


def rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(orjson.loads, path.read_bytes().splitlines())}


def test_multi_turn_interleaves_generated_answers() -> None:
    rec = {
        "prompt": [SYSTEM, {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}],
        "turns": [{"completion": "a1", "reasoning_content": "r1"}, {"completion": "a2"}],
    }
    convo = conversation(rec, reasoning=True)
    assert [(m["role"], m["content"]) for m in convo] == [
        ("system", "be brief"),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert convo[2]["reasoning_content"] == "r1"
    assert "reasoning_content" not in conversation(rec, reasoning=False)[2]


def test_specforge_rows_pass_its_loader_rules(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sf.jsonl"
    counts = export(out, dest, ExportOptions(format="specforge"))
    got = rows(dest)
    assert set(got) == {"a", "b", "t", "multi"}
    assert all(specforge_valid(r["conversations"]) for r in got.values())
    assert counts.kept == 4 and counts.completed == 5 and counts.failed == 1
    assert counts.dropped == {"empty completion": 1}
    assert orjson.loads((tmp_path / "sf.jsonl.counts.json").read_bytes())["written"] == 4
    assert got["a"]["prompt_token_ids"] == [1, 2] and got["a"]["completion_token_ids"] == [3, 4]
    assert got["a"]["conversations"][-1]["reasoning_content"] == "thinking a"
    assert got["t"]["conversations"] == [
        {"role": "user", "content": "plain text prompt"},
        {"role": "assistant", "content": "answer t"},
    ]


def test_filters_and_reasoning_drop(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "msgs.jsonl"
    counts = export(
        out,
        dest,
        ExportOptions(format="openai-messages", reasoning="drop", drop=("truncated",), min_completion_tokens=6),
    )
    got = rows(dest)
    assert set(got) == {"a", "multi"}
    assert counts.dropped["truncated (finish_reason length)"] == 1
    assert counts.dropped["fewer than 6 completion tokens"] == 1
    assert all("reasoning_content" not in m for r in got.values() for m in r["messages"])


def test_sharegpt_roles(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sg.jsonl"
    export(out, dest, ExportOptions(format="sharegpt", token_ids=False))
    multi = rows(dest)["multi"]
    assert [t["from"] for t in multi["conversations"]] == ["system", "human", "gpt", "human", "gpt"]
    assert "prompt_token_ids" not in rows(dest)["a"]


def test_parquet_and_hf(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "data.parquet"
    export(out, dest, ExportOptions(format="parquet"))
    table = pq.read_table(dest)
    assert table.num_rows == 4
    by_id = {r["id"]: r for r in table.to_pylist()}
    assert by_id["a"]["completion_token_ids"] == [3, 4]
    assert [m["role"] for m in by_id["multi"]["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    import datasets

    hf = tmp_path / "hf"
    export(out, hf, ExportOptions(format="hf"))
    ds = datasets.load_from_disk(str(hf))
    assert sorted(ds["id"]) == ["a", "b", "multi", "t"]


def test_drop_by_quality_signal_with_counts(tmp_path: Path) -> None:
    """Records written without signals get them computed; a duplicate keeps its first copy."""
    from tokenmill.quality.signals import signals

    root = tmp_path / "q"
    od = OutputDir(root, shard_size=3)
    od.open()
    loop = "Let me start. " + "I need to check this again. " * 120
    same = "The capital of France is Paris, a city on the Seine with about two million people."
    od.write(completion("loop", completion=loop, finish_reason="length"))
    od.write(completion("think", completion="<think>still thinking", finish_reason="length"))
    od.write(completion("dup1", completion=same))
    od.write(completion("dup2", completion=same + "\n"))  # the same answer, other whitespace
    od.write(completion("short1", completion="Yes."))
    od.write(completion("short2", completion="Yes."))  # too short to call a duplicate
    signed = completion("signed", completion="fine answer")
    signed.quality = {**signals("fine answer", "stop").as_dict(), "flags": ["repetition"]}  # as written: trusted
    od.write(signed)
    od.close(seal=True)
    dest = tmp_path / "x.jsonl"
    counts = export(root, dest, ExportOptions(format="sharegpt", drop=("degenerate", "duplicate")))
    assert set(rows(dest)) == {"dup1", "short1", "short2"}
    assert counts.kept == 3
    assert counts.dropped == {
        "degenerate (loop, empty or no final answer)": 3,
        "duplicate (an answer an earlier record already gave)": 1,
    }
    counts = export(root, dest, ExportOptions(format="sharegpt", drop=("repetition", "truncated")))
    assert counts.dropped == {"repetition (a loop at the answer's end)": 2, "truncated (finish_reason length)": 1}


def test_an_unknown_drop_signal_names_the_choices() -> None:
    from tokenmill.quality.records import parse_selectors

    assert parse_selectors("degenerate, duplicate", "--drop") == ("degenerate", "duplicate")
    choices = "truncated, empty, no_answer, repetition, think_markers, degenerate, duplicate"
    with pytest.raises(ConfigError, match=choices):
        parse_selectors("loops", "--drop")


def test_kept_input_columns_ride_along_in_every_format(tmp_path: Path) -> None:
    root = tmp_path / "cols"
    od = OutputDir(root, shard_size=2)
    od.open()
    od.write(completion("x", fields={"label": "math", "source": "seed", "thinking": "col"}))
    od.write(completion("y"))  # a record without columns: nothing added
    od.close(seal=True)
    dest = tmp_path / "kept.jsonl"
    export(root, dest, ExportOptions(format="sharegpt", keep_fields=("label", "missing")))
    got_rows = rows(dest)
    assert got_rows["x"]["label"] == "math" and "source" not in got_rows["x"] and "missing" not in got_rows["x"]
    assert "label" not in got_rows["y"]
    table = tmp_path / "kept.parquet"
    export(root, table, ExportOptions(format="parquet", keep_fields="all"))
    got = {r["id"]: r for r in pq.read_table(table).to_pylist()}
    assert orjson.loads(got["x"]["fields"]) == {"label": "math", "source": "seed", "thinking": "col"}
    assert got["y"]["fields"] is None
    with pytest.raises(ConfigError, match="--keep-fields thinking: the exported row has a field of that name"):
        export(root, tmp_path / "clash.jsonl", ExportOptions(format="sharegpt", keep_fields="all"))
    assert not (tmp_path / "clash.jsonl").exists()  # no partial file
