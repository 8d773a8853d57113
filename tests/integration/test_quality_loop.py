"""The quality loop on the simulated server: it gives degenerate answers in configured shares, ``inspect``
finds them (precision and recall measured against the answers the server chose to spoil), ``export --drop``
leaves them out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenmill.config import JobSpec, SimSpec
from tokenmill.export import ExportOptions, export
from tokenmill.output.records_reader import iter_records
from tokenmill.quality.corpus import inspect_output
from tokenmill.quality.registry import DEGENERATE
from tokenmill.run.runner import run_job
from tokenmill.sim.server import SimServer
from tokenmill.sim.text import content_key, degeneration, degeneration_rates, render_chat

PROMPTS = 1500
SIM = SimSpec(instant=True, loop_rate=0.04, empty_rate=0.02, unclosed_think_rate=0.02, output_len_mean=150, seed=3)
SAMPLING: dict[str, Any] = {"max_tokens": 400, "temperature": 0.7}


def write_prompts(path: Path) -> Path:
    with path.open("w") as fh:
        for i in range(PROMPTS):
            fh.write(json.dumps({"id": f"q{i}", "prompt": f"Question {i}: explain topic number {i * 7 % 101}."}) + "\n")
    return path


def run(tmp_path: Path, out: Path, sampling: dict[str, Any] = SAMPLING) -> None:
    async def go() -> None:
        async with SimServer(SIM) as sim:
            job = JobSpec.model_validate(
                {
                    "input": {"path": str(write_prompts(tmp_path / "prompts.jsonl"))},
                    "servers": [sim.url],
                    "api": "openai-chat",
                    "model": "m",
                    "sampling": sampling,
                    "output": {"dir": str(out), "shard_size": 200},
                    "concurrency": 32,
                }
            )
            result = await run_job(job, live=False)
            assert result.finished

    asyncio.run(go())


def spoiled(rec: dict[str, Any]) -> str | None:
    """What the simulated server chose for this record's request (its own deterministic draw)."""
    seed = rec["sampling"].get("seed")
    extra = rec["sampling"].get("extra_body") or {}
    penalized = any((extra.get(k) or 0) > 0 for k in ("frequency_penalty", "presence_penalty"))
    prompt = rec["prompt"]
    messages: list[dict[str, object]] = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    )  # as openai-chat sends it
    key = content_key(SIM.seed, render_chat(messages), seed, penalized)
    return degeneration(key, degeneration_rates(SIM, penalized))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("quality")
    out = tmp / "out"
    run(tmp, out)
    return out


def test_inspect_finds_the_injected_answers_and_nothing_else(generated: Path) -> None:
    injected = {r["id"] for r in iter_records(generated) if spoiled(r)}
    flagged = {r["id"] for r in iter_records(generated) if set(r["quality"]["flags"]) & set(DEGENERATE)}
    assert 0.05 * PROMPTS < len(injected) < 0.12 * PROMPTS
    precision = len(flagged & injected) / len(flagged)
    recall = len(flagged & injected) / len(injected)
    print(f"injected {len(injected)}, flagged {len(flagged)}, precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.95 and recall >= 0.95

    result = inspect_output(generated)
    assert result.records == PROMPTS
    assert result.degenerate == len(flagged)
    by_kind = {"loop": "repetition", "empty": "empty", "unclosed_think": "no_answer"}
    for rec in iter_records(generated):
        kind = spoiled(rec)
        if kind is not None:
            assert by_kind[kind] in rec["quality"]["flags"], rec["id"]
    worst = result.worst["repetition"]
    assert worst and all(spoiled_by_id(generated, e.id) == "loop" for e in worst)
    assert "loop from character" in worst[0].where
    assert result.lengths["length"].summary()["p50"] == SAMPLING["max_tokens"]


def spoiled_by_id(out: Path, rid: str) -> str | None:
    return next(spoiled(r) for r in iter_records(out) if r["id"] == rid)


def test_inspect_json_and_export_drop_agree(generated: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tokenmill.cli import cli

    res = CliRunner().invoke(cli, ["inspect", str(generated), "--json"])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(res.output)
    degenerate = doc["signals"]["degenerate"]["count"]
    counts = export(generated, tmp_path / "x.jsonl", ExportOptions(format="sharegpt", drop=("degenerate",)))
    dropped = sum(n for reason, n in counts.dropped.items() if reason != "empty completion")
    assert dropped + counts.dropped["empty completion"] == degenerate
    assert counts.kept == PROMPTS - degenerate


def test_the_report_has_the_quality_section(generated: Path, tmp_path: Path) -> None:
    from tokenmill.report import build_report

    page = build_report(generated, tmp_path / "r.html")
    html = page.read_text()
    result = inspect_output(generated)
    assert "<h2>Corpus quality</h2>" in html
    assert f"<td>degenerate</td><td>{result.degenerate:,}</td>" in html
    for name in ("quality_signals", "quality_lengths"):
        assert (tmp_path / "r" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert f"<figure id='{name}'>" in html
    assert f"<td>{result.worst['repetition'][0].id}</td><td>repetition</td>" in html
    assert "<h2>Corpus quality</h2>" not in build_report(generated, tmp_path / "n.html", quality=False).read_text()
