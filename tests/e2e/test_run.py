"""`tokenmill run` end to end: each API kind, faults, permanent errors, bad rows, server loss and recovery."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.engines.process import free_port
from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess, start_sim


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "sglang-generate"])
def test_happy_path_each_api(api: str, fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 120)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, api=api)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed
    assert sorted(r["id"] for r in done) == [f"p{i:05d}" for i in range(120)]
    assert len(list(out.glob("completions_*.jsonl"))) == 3  # 50 + 50 + a sealed tail of 20
    assert not list(out.glob("*.open"))
    rec = done[0]
    assert rec["completion"] and rec["finish_reason"] in ("stop", "length")
    assert rec["completion_tokens"] > 0 and rec["prompt_tokens"] > 0
    assert rec["server"] in {s.url for s in fleet} and rec["model"] == "tokenmill-sim"
    assert rec["sampling"]["max_tokens"] == 64
    assert {r["server"] for r in done} == {s.url for s in fleet}
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["finished"] and summary["completed_total"] == 120
    assert "completions/s" in (out / "summary.md").read_text()
    verify = run_cli("verify", str(out), "--input", str(job))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # a rerun has nothing left to do and changes nothing
    again = run_cli("run", str(job), "--no-live")
    assert again.returncode == 0, again.stderr
    assert len(read_records(out)[0]) == 120


@pytest.mark.parametrize(
    "fleet",
    [(2, ["--error-rate", "0.15", "--rate-limit-rate", "0.05", "--drop-rate", "0.05", "--malformed-rate", "0.05"])],
    indirect=True,
)
def test_injected_faults_are_retried_to_completion(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 200)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, retry={"quarantine_after": 50})
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed
    assert Counter(r["id"] for r in done) == Counter(f"p{i:05d}" for i in range(200))
    assert any(r["attempts"] > 1 for r in done)
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["retries"] > 0


@pytest.mark.parametrize("fleet", [(1, ["--context-length", "200"])], indirect=True)
def test_too_long_prompt_is_a_recorded_permanent_failure(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 30)
    with data.open("ab") as f:
        f.write(orjson.dumps({"id": "long", "prompt": "word " * 2000}) + b"\n")
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, sampling={"max_tokens": 32})
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert [f["id"] for f in failed] == ["long"]
    assert failed[0]["http_status"] == 400 and failed[0]["attempts"] == 1
    assert "context" in failed[0]["error"].lower() or "long" in failed[0]["error"].lower()
    assert len(done) == 30
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0


def test_bad_row_stops_with_file_and_line_or_is_skipped(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 10)
    with data.open("ab") as f:
        f.write(b'{"id": "broken", "prompt": \n')
        f.write(orjson.dumps({"id": "after", "prompt": "still here"}) + b"\n")
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2
    assert f"{data}:11" in res.stderr and "Traceback" not in res.stderr
    assert "--on-bad-row skip" in res.stderr
    res = run_cli("run", str(job), "--no-live", "--on-bad-row", "skip")
    assert res.returncode == 0, res.stderr
    done, _ = read_records(out)
    assert sorted(r["id"] for r in done) == sorted([f"p{i:05d}" for i in range(10)] + ["after"])
    skipped = [orjson.loads(line) for line in (out / "skipped.jsonl").read_bytes().splitlines()]
    assert [s["source"] for s in skipped] == [f"{data}:11"]
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0


def test_invalid_job_file_names_the_field(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("input: {path: x.jsonl}\nservers: [http://127.0.0.1:1]\napi: openai-chatt\noutput: {dir: o}\n")
    res = run_cli("run", str(job))
    assert res.returncode == 2
    assert "api" in res.stderr and "openai-chat" in res.stderr and "Traceback" not in res.stderr


def test_token_ids_with_generate_and_no_tokenizer_is_refused_at_start(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "input: {path: x.jsonl}\nservers: [http://127.0.0.1:1]\napi: sglang-generate\nsave_token_ids: true\n"
        "output: {dir: o}\n"
    )
    res = run_cli("run", str(job))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "needs a tokenizer" in res.stderr and "input_ids" in res.stderr


def test_dead_server_is_set_aside_and_used_again_when_back(tmp_path: Path) -> None:
    args = ["--time-scale", "0.05"]
    steady = start_sim(args, log_path=tmp_path / "steady.log")
    flaky = start_sim(args, log_path=tmp_path / "flaky.log")
    port = flaky.url.rsplit(":", 1)[1]
    flaky.kill()  # down before the run starts
    revived: SimProcess | None = None
    try:
        data = write_prompts(tmp_path / "in.jsonl", 400)
        out = tmp_path / "out"
        job = write_job(
            tmp_path / "job.yaml", [steady.url, flaky.url], data, out, concurrency=4, retry={"quarantine_after": 2}
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        log = out / "tokenmill.log"
        # wait until the client has set the dead server aside, then bring it back on the same port
        wait_for("the dead server set aside", lambda: log.exists() and "setting server" in log.read_text(), alive=proc)
        revived = start_sim(args, port=int(port))
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        done, failed = read_records(out)
        assert not failed and len(done) == 400
        assert "answers again" in log.read_text()
        assert any(r["server"] == flaky.url for r in done), "the revived server got work again"
    finally:
        steady.stop()
        if revived is not None:
            revived.stop()


def test_a_server_the_servers_file_marks_down_gets_no_request(fleet: list[SimProcess], tmp_path: Path) -> None:
    """The job's own reading of its servers_file keeps the `# down` mark: the run never tries that server."""
    dead = f"http://127.0.0.1:{free_port()}"
    servers = tmp_path / "servers.txt"
    servers.write_text(f"{fleet[0].url}\n{dead}  # down\n")
    data = write_prompts(tmp_path / "in.jsonl", 40)
    job = write_job(tmp_path / "job.yaml", [], data, tmp_path / "out", servers_file=str(servers))
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert f"setting server {dead} aside" not in res.stderr  # never tried
    done, _ = read_records(tmp_path / "out")
    assert len(done) == 40 and {r["server"] for r in done} == {fleet[0].url}
