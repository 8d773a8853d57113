"""The quality loop through the CLI against a simulated server that spoils a known share of its answers:
run → inspect → regenerate (interrupted and carried on) → inspect shows the rate fall → verify passes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import TOKENMILL, run_cli, write_job
from tests.helpers.s3server import S3, TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.config import SimSpec
from tokenmill.fleet.simprocs import start_sim
from tokenmill.output.records_reader import iter_records
from tokenmill.output.rounds import rounds
from tokenmill.sim.text import content_key, degeneration, degeneration_rates, render_chat
from tokenmill.storage.corpus import open_corpus

PROMPTS = 600
SEED = 5
RATES: dict[str, Any] = {"loop_rate": 0.05, "empty_rate": 0.03, "unclosed_think_rate": 0.03}
SIM = SimSpec(seed=SEED, **RATES)


def spoiled(rec: dict[str, Any]) -> str | None:
    """What the simulated server chose for the request that produced ``rec`` (its own deterministic draw)."""
    sampling = rec["sampling"]
    extra = sampling.get("extra_body") or {}
    penalized = any((extra.get(k) or 0) > 0 for k in ("frequency_penalty", "presence_penalty"))
    prompt = rec["prompt"]
    messages: list[dict[str, object]] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    key = content_key(SEED, render_chat(messages), sampling.get("seed"), penalized)
    return degeneration(key, degeneration_rates(SIM, penalized))


def inspect(out: Path) -> dict[str, Any]:
    res = run_cli("inspect", str(out), "--json")
    assert res.returncode == 0, res.stderr
    report: dict[str, Any] = json.loads(res.stdout)
    return report


def flagged(out: Path) -> set[str]:
    return {
        r.key
        for r in open_corpus(out).iter_live()
        if {"repetition", "empty", "no_answer"} & set((r.answer.quality or {})["flags"])
    }


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    args = ["--seed", str(SEED), "--time-scale", "0.02", "--output-len-mean", "60"]
    for name, rate in RATES.items():
        args += [f"--{name.replace('_', '-')}", str(rate)]
    proc = start_sim(args, log_path=tmp_path / "sim.log")
    try:
        yield proc
    finally:
        proc.stop()


def test_generate_inspect_regenerate_until_the_rate_is_the_baseline(sim: Any, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w") as fh:
        for i in range(PROMPTS):
            fh.write(json.dumps({"id": f"q{i:04d}", "prompt": f"Tell me about the number {i}."}) + "\n")
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [sim.url], prompts, out, sampling={"max_tokens": 200}, concurrency=32)
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr

    injected = {r["id"] for r in iter_records(out) if spoiled(r)}
    first = inspect(out)
    assert flagged(out) == injected  # precision and recall 1.0 on this corpus
    assert first["signals"]["degenerate"]["count"] == len(injected) > 0.06 * PROMPTS

    # a round interrupted by SIGKILL, then carried on by the same command
    args = ["regenerate", str(job), "--where", "degenerate", "--sampling", "seed=1"]
    args += ["--sampling", "frequency_penalty=0.5", "--no-live", "--concurrency", "2"]
    log = (tmp_path / "regenerate.log").open("w")
    slow = subprocess.Popen([*TOKENMILL, *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        round_out = out / "regenerate" / "round-001"
        wait_for(
            "the round's first 10 records",
            lambda: round_out.is_dir() and sum(1 for _ in iter_records(round_out)) >= 10,
            timeout=120,
            alive=slow,
            log=tmp_path / "regenerate.log",
        )
        os.kill(slow.pid, signal.SIGKILL)
    finally:
        slow.wait(timeout=30)
        log.close()
    partial = {r["id"] for r in iter_records(round_out)}
    assert 10 <= len(partial) < len(injected)
    assert len(list(open_corpus(out).iter_live())) == PROMPTS  # one live answer per prompt, mid-round too
    res = run_cli("regenerate", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "carrying on with round-001" in res.stderr

    live = [r.to_json() for r in open_corpus(out).iter_live()]
    assert len(live) == PROMPTS and len({r["id"] for r in live}) == PROMPTS
    regenerated = {r["id"] for r in live if r.get("round") == 1}
    assert regenerated == injected
    # what is degenerate now is exactly what the server spoiled again under the new sampling
    again = {r["id"] for r in live if r.get("round") == 1 and spoiled(r)}
    assert flagged(out) == again
    second = inspect(out)
    assert second["signals"]["degenerate"]["count"] == len(again) < 0.25 * len(injected)

    verify = run_cli("verify", str(out), "--input", str(job))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{len(injected):,} prompts have a newer answer" in verify.stdout

    # another round for what is left: the rate reaches the server's baseline (normal answers are never flagged)
    while flagged(out):
        res = run_cli("regenerate", str(job), "--where", "degenerate", "--sampling", f"seed={len(rounds(out)) + 1}",
                      "--no-live", timeout=300)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert len(rounds(out)) <= 4
    assert inspect(out)["signals"]["degenerate"]["count"] == 0
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0
    dry = run_cli("regenerate", str(out), "--where", "degenerate", "--dry-run")  # OUT names its job too
    assert dry.returncode == 0 and f"0 of {PROMPTS:,} answers match --where degenerate" in dry.stderr, dry.stderr
    export = run_cli("export", str(out), "--format", "sharegpt", "--to", str(tmp_path / "train.jsonl"))
    assert export.returncode == 0, export.stderr
    rows = [orjson.loads(line) for line in (tmp_path / "train.jsonl").read_bytes().splitlines()]
    assert len(rows) == PROMPTS


def test_inspect_from_the_remote_prefix_sees_what_the_output_holds_rounds_included(
    sim: Any, s3: S3, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w") as fh:
        for i in range(200):
            fh.write(json.dumps({"id": f"r{i:04d}", "prompt": f"Describe item {i}."}) + "\n")
    out = tmp_path / "out"
    env = {**TEST_ENV, "AWS_ENDPOINT_URL": s3.endpoint}
    output = {"shard_size": 50, "remote": s3.url(), "upload": {"backoff_base_s": 0.05, "drain_timeout_s": 60}}
    job = write_job(tmp_path / "job.yaml", [sim.url], prompts, out, sampling={"max_tokens": 200}, output=output)
    assert run_cli("run", str(job), "--no-live", env=env, timeout=300).returncode == 0
    regen = run_cli("regenerate", str(job), "--where", "degenerate", "--sampling", "seed=9", "--no-live", env=env)
    assert regen.returncode == 0, regen.stderr
    assert any(k.startswith("corpus/run-1/_tokenmill/regenerate/round-001/completions_") for k in s3.objects())
    local = inspect(out)
    remote = run_cli("inspect", s3.url(), "--json", env=env)
    assert remote.returncode == 0, remote.stderr
    seen = json.loads(remote.stdout)
    page = tmp_path / "remote.html"
    rep = run_cli("report", s3.url(), "--to", str(page), env=env, timeout=180)
    assert rep.returncode == 0, rep.stderr
    html = page.read_text()
    assert "<p>200 completions, 0 failed." in html
    assert f"<td>degenerate</td><td>{local['signals']['degenerate']['count']:,}</td>" in html
    assert seen["records"] == local["records"] == 200
    assert seen["signals"] == local["signals"]
    assert local["signals"]["degenerate"]["count"] < len({r["id"] for r in iter_records(out) if spoiled(r)})
