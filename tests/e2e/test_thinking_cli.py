"""The thinking mode from the command line: ``tokenmill run`` against a simulated thinking model started without a
reasoning parser stops at start with the message that says what to change (no traceback, nothing written), and the
same job runs to the end once the server is started with ``--reasoning-parser qwen3``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import start_sim

PROMPTS = 30


def _job(tmp: Path, url: str) -> tuple[Path, Path]:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"Explain topic {i}."}) + "\n" for i in range(PROMPTS))
    )
    out = tmp / "out"
    return write_job(tmp / "job.yaml", [url], prompts, out, thinking="on", sampling={"max_tokens": 200}), out


def test_run_stops_on_inline_thinking_and_runs_with_a_parser(tmp_path: Path) -> None:
    sim = start_sim(["--thinking", "--instant"], log_path=tmp_path / "sim.log")
    try:
        job, out = _job(tmp_path, sim.url)
        res = run_cli("run", str(job), "--no-live")
    finally:
        sim.stop()
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    for needed in ("--reasoning-parser qwen3", "reasoning_parser: qwen3", "thinking_inline: ok"):
        assert needed in res.stderr, res.stderr
    assert not list(out.glob("completions_*.jsonl"))

    parsed = start_sim(["--thinking", "--instant", "--reasoning-parser", "qwen3"], log_path=tmp_path / "sim2.log")
    try:
        job, out = _job(tmp_path, parsed.url)
        res = run_cli("run", str(job), "--no-live")
    finally:
        parsed.stop()
    assert res.returncode == 0, res.stderr
    assert "returns the reasoning apart from the answer" in res.stderr
    done, failed = read_records(out)
    assert len(done) == PROMPTS and not failed
    assert all(r["thinking"] is True and r["reasoning_content"] for r in done)
