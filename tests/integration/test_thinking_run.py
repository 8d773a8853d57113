"""The thinking mode end to end on the simulated server answering like a thinking model: inline thinking caught at
start (no reasoning parser), the reasoning split off with one (records carry reasoning_content and thinking: true),
a mixed share the same per id in every run, a row's own column, and reasoning cut at max_tokens kept and flagged."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tokenmill.config import JobSpec, SimSpec
from tokenmill.errors import ConfigError
from tokenmill.export import ExportOptions, export
from tokenmill.output.records_reader import iter_records
from tokenmill.run.runner import run_job
from tokenmill.sim.server import SimServer
from tokenmill.sources.thinking import thinking_for

PROMPTS = 120
THINKER = SimSpec(instant=True, thinking=True, output_len_mean=60, seed=2)
PARSED = THINKER.model_copy(update={"reasoning_parser": "qwen3"})


def write_prompts(path: Path, rows: int = PROMPTS, extra: Any = None) -> Path:
    with path.open("w") as fh:
        for i in range(rows):
            row: dict[str, Any] = {"id": f"q{i}", "prompt": f"Question {i}: explain topic {i * 7 % 31}."}
            if extra is not None:
                row.update(extra(i))
            fh.write(json.dumps(row) + "\n")
    return path


def run(sim_cfg: SimSpec, inp: Path, out: Path, **job: Any) -> None:
    async def go() -> None:
        async with SimServer(sim_cfg) as sim:
            spec = JobSpec.model_validate(
                {
                    "input": {"path": str(inp), **job.pop("input", {})},
                    "servers": [sim.url],
                    "model": "m",
                    "sampling": job.pop("sampling", {"max_tokens": 400}),
                    "output": {"dir": str(out), "shard_size": 50},
                    "concurrency": 16,
                    **job,
                }
            )
            result = await run_job(spec, live=False)
            assert result.finished

    asyncio.run(go())


def records(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in iter_records(out)}


def test_thinking_left_inline_stops_the_run_at_start_naming_the_reasoning_parser(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as caught:
        run(THINKER, write_prompts(tmp_path / "p.jsonl"), out, thinking="on")
    message = str(caught.value)
    for needed in (
        "--reasoning-parser qwen3",
        "deepseek-r1",
        "deepseek_r1",
        "reasoning_parser: qwen3",
        "thinking_inline: ok",
    ):
        assert needed in message, needed
    assert not list(out.glob("completions_*.jsonl")), "nothing is written before the probe passed"


def test_inline_thinking_said_to_be_intended_runs_and_every_answer_is_marked(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(THINKER, write_prompts(tmp_path / "p.jsonl"), out, thinking="on", thinking_inline="ok")
    recs = records(out)
    assert len(recs) == PROMPTS
    assert all(r["thinking"] is True and r["reasoning_content"] is None for r in recs.values())
    assert all("<think>" in r["completion"] and "think_markers" in r["quality"]["flags"] for r in recs.values())


def test_with_a_reasoning_parser_the_records_carry_the_reasoning_apart_and_thinking_true(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(PARSED, write_prompts(tmp_path / "p.jsonl"), out, thinking="on")
    recs = records(out)
    assert len(recs) == PROMPTS
    for r in recs.values():
        assert r["thinking"] is True
        assert r["reasoning_content"], r["id"]
        assert "<think>" not in r["completion"] and "</think>" not in r["completion"]
        assert "think_markers" not in r["quality"]["flags"]


def test_a_mixed_share_sends_each_id_the_same_mode_in_every_run(tmp_path: Path) -> None:
    inp = write_prompts(tmp_path / "p.jsonl")
    modes = []
    for name in ("a", "b"):
        run(PARSED, inp, tmp_path / name, thinking=0.3)
        modes.append({rid: r["thinking"] for rid, r in records(tmp_path / name).items()})
    assert modes[0] == modes[1]
    assert modes[0] == {f"q{i}": thinking_for(0.3, f"q{i}") for i in range(PROMPTS)}
    on = sum(modes[0].values())
    assert 0.15 * PROMPTS < on < 0.45 * PROMPTS
    for r in records(tmp_path / "a").values():  # the server honoured enable_thinking: false
        assert bool(r["reasoning_content"]) == r["thinking"], r["id"]


def test_a_row_column_sets_the_mode_and_rows_without_it_take_the_jobs(tmp_path: Path) -> None:
    def column(i: int) -> dict[str, Any]:
        return {} if i % 3 == 2 else {"think": i % 3 == 0}

    out = tmp_path / "out"
    run(
        PARSED,
        write_prompts(tmp_path / "p.jsonl", extra=column),
        out,
        thinking="off",
        input={"thinking_field": "think"},
    )
    recs = records(out)
    for i in range(PROMPTS):
        assert recs[f"q{i}"]["thinking"] is (i % 3 == 0), i


def test_nothing_sent_without_a_thinking_mode_records_null(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(PARSED, write_prompts(tmp_path / "p.jsonl", rows=10), out)
    assert all(r["thinking"] is None for r in records(out).values())


def test_reasoning_cut_at_max_tokens_is_recorded_and_flagged_truncated_and_no_answer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    long_thinker = PARSED.model_copy(update={"output_len_mean": 400, "output_len_sigma": 0.2})
    run(long_thinker, write_prompts(tmp_path / "p.jsonl"), out, thinking="on", sampling={"max_tokens": 64})
    recs = records(out)
    assert len(recs) == PROMPTS, "no row is dropped at write time"
    cut = [r for r in recs.values() if not r["completion"].strip()]
    assert len(cut) > PROMPTS // 2
    for r in cut:
        assert r["finish_reason"] == "length" and r["reasoning_content"]
        assert r["quality"]["flags"] == ["truncated", "no_answer"]


@pytest.mark.parametrize("fmt", ["sharegpt", "openai-messages", "specforge", "parquet"])
def test_every_export_format_carries_the_mode_each_answer_was_generated_with(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    run(PARSED, write_prompts(tmp_path / "p.jsonl", rows=40), out, thinking=0.5)
    want = {rid: r["thinking"] for rid, r in records(out).items()}
    assert set(want.values()) == {True, False}
    dest = tmp_path / f"export.{fmt}"
    export(out, dest, ExportOptions(format=fmt))  # type: ignore[arg-type]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(dest).to_pylist()
    else:
        rows = [json.loads(line) for line in dest.read_text().splitlines()]
    assert {r["id"]: r["thinking"] for r in rows} == want
