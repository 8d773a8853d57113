"""The start probe runs for every job, in the job's thinking mode, from the command line against simulated
thinking models: a job that leaves ``thinking`` unset against a model that thinks by default (Qwen3.x do) and
leaves the thinking inline stops at start; a switch set by hand in ``sampling.extra_body`` counts as the job's mode
(records say it); ``thinking: off`` against a model that thinks anyway stops with the fix; a switch that
disagrees with ``thinking`` is refused when the job is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import start_sim

PROMPTS = 20


def _job(tmp: Path, url: str, name: str, **extra: Any) -> tuple[Path, Path]:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"Explain topic {i}."}) + "\n" for i in range(PROMPTS))
    )
    out = tmp / name
    sampling = {"max_tokens": 200, **extra.pop("sampling", {})}
    return write_job(tmp / f"{name}.yaml", [url], prompts, out, sampling=sampling, **extra), out


def _run_against(tmp: Path, sim_args: list[str], name: str, **job: Any) -> tuple[Any, Path]:
    sim = start_sim(["--instant", *sim_args], log_path=tmp / f"{name}.sim.log")
    try:
        path, out = _job(tmp, sim.url, name, **job)
        return run_cli("run", str(path), "--no-live"), out
    finally:
        sim.stop()


def test_thinking_left_unset_against_a_model_that_thinks_by_default_is_caught_at_start(tmp_path: Path) -> None:
    res, out = _run_against(tmp_path, ["--thinking"], "inline")
    assert res.returncode != 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "thinking is not set in the job" in res.stderr and "thinks by default" in res.stderr, res.stderr
    for fix in ("set thinking: off", "--reasoning-parser qwen3", "thinking_inline: ok"):
        assert fix in res.stderr, (fix, res.stderr)
    assert not list(out.glob("completions_*.jsonl*")), "nothing is generated before the probe passed"

    res, out = _run_against(tmp_path, ["--thinking", "--reasoning-parser", "qwen3"], "parsed")
    assert res.returncode == 0, res.stderr
    assert "thinks by default and returns the reasoning apart from the answer" in res.stderr
    done, failed = read_records(out)
    assert len(done) == PROMPTS and not failed
    assert all(r["thinking"] is None and r["reasoning_content"] and "<think>" not in r["completion"] for r in done)


def test_a_thinking_switch_in_extra_body_is_the_jobs_mode(tmp_path: Path) -> None:
    switch = {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}
    res, out = _run_against(tmp_path, ["--thinking"], "inline", sampling=switch)
    assert res.returncode != 0
    assert "returned the thinking inline in the answer" in res.stderr and "--reasoning-parser" in res.stderr
    assert not list(out.glob("completions_*.jsonl*"))

    res, out = _run_against(tmp_path, ["--thinking", "--reasoning-parser", "qwen3"], "parsed", sampling=switch)
    assert res.returncode == 0, res.stderr
    assert "thinking: on" in res.stderr  # the start line says the mode the switch asked for
    done, _ = read_records(out)
    assert len(done) == PROMPTS and all(r["thinking"] is True and r["reasoning_content"] for r in done)


def test_thinking_off_against_a_model_that_thinks_anyway_stops_with_the_fix(tmp_path: Path) -> None:
    for parser, name in (([], "inline"), (["--reasoning-parser", "qwen3"], "split")):
        res, out = _run_against(tmp_path, ["--thinking", "--no-thinking-switch", *parser], name, thinking="off")
        assert res.returncode != 0, res.stderr
        assert "Traceback" not in res.stderr
        assert "thinking: off, but" in res.stderr and "thought anyway" in res.stderr, res.stderr
        for fix in ("enable_thinking", "set thinking: on", "--reasoning-parser qwen3"):
            assert fix in res.stderr, (fix, res.stderr)
        assert not list(out.glob("completions_*.jsonl*"))

    res, out = _run_against(tmp_path, ["--thinking"], "honoured", thinking="off")  # the template honours the switch
    assert res.returncode == 0, res.stderr
    assert "holds no thinking" in res.stderr
    done, _ = read_records(out)
    assert len(done) == PROMPTS
    assert all(r["thinking"] is False and not r["reasoning_content"] and "<think>" not in r["completion"] for r in done)


def test_a_switch_that_disagrees_with_thinking_is_refused_when_the_job_is_read(tmp_path: Path) -> None:
    path, out = _job(
        tmp_path,
        "http://127.0.0.1:9",
        "out",
        thinking="off",
        sampling={"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
    )
    res = run_cli("run", str(path), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "disagree" in res.stderr and "remove enable_thinking from extra_body" in res.stderr, res.stderr
    assert not out.exists()
