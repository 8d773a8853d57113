"""Whole-CLI runs with a fleet of simulated servers started from a profile: a server killed mid-run is
restarted and nothing is lost; a rolling re-flag during a run changes every server's flags while the run
goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.cli import TOKENMILL, read_records, run_cli, write_job, write_prompts
from tests.helpers.waiting import wait_for
from tokenmill.fleet.state import pid_alive, read_json


def write_profile(path: Path, state_dir: Path, **fields: Any) -> Path:
    profile: dict[str, Any] = {
        "engine": "sim",
        "model": "tokenmill-sim",
        "gpus": 2,
        "base_port": 0,
        "state_dir": str(state_dir),
        "restart_backoff_s": 0.2,
        "drain_notice_s": 0.3,
        "drain_timeout_s": 20,
        "start_timeout_s": 30,
        **fields,
    }
    path.write_text(yaml.safe_dump(profile))
    return path


def shard_lines(out: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in out.glob("completions_*.jsonl*"))


def wait_lines(proc: subprocess.Popen[str], out: Path, n: int, timeout: float = 60) -> None:
    wait_for(f"{n} records written", lambda: out.exists() and shard_lines(out) >= n, timeout, alive=proc)


def fleet_job(tmp_path: Path, state_dir: Path, n: int, **extra: Any) -> tuple[Path, Path]:
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml",
        [],
        data,
        out,
        servers_file=str(state_dir / "endpoints.txt"),
        servers_file_poll_s=0.1,
        retry={"quarantine_after": 2, "probe_interval_s": 0.2, "backoff_base_s": 0.01, "backoff_max_s": 0.2},
        **extra,
    )
    return job, out


def test_a_server_killed_mid_run_is_restarted_and_nothing_is_lost(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    profile = write_profile(tmp_path / "fleet.yaml", state_dir, flags={"time-scale": 0.3, "max-running-requests": 16})
    res = run_cli("fleet", "up", str(profile), "--detach", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "fleet ready" in res.stdout
    try:
        status = run_cli("fleet", "status", str(profile))
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count(" up ") == 2 and "time-scale=0.3" in status.stdout
        n = 400
        job, out = fleet_job(tmp_path, state_dir, n, concurrency=8, sampling={"max_tokens": 32})
        run = subprocess.Popen([*TOKENMILL, "run", str(job), "--no-live"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        wait_lines(run, out, 60)
        victim = read_json(state_dir / "state.json")["servers"][0]  # type: ignore[index]
        killed_at = time.time()
        os.kill(victim["pid"], signal.SIGKILL)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        done, failed = read_records(out)
        assert failed == [] and len(done) == n
        assert any(r["server"] == victim["url"] and r["finished_at"] > killed_at + 0.5 for r in done), (
            "the restarted server got work again"
        )
        after = read_json(state_dir / "state.json")["servers"][0]  # type: ignore[index]
        assert after["restarts"] == 1 and after["url"] == victim["url"] and after["pid"] != victim["pid"]
        assert "exited with code -9" in (state_dir / "server-0.log").read_text() or after["error"] is None
        verified = run_cli("verify", str(out), "--input", str(job))
        assert verified.returncode == 0, verified.stdout
    finally:
        down = run_cli("fleet", "down", str(profile), timeout=60)
    assert down.returncode == 0, down.stderr
    state = read_json(state_dir / "state.json")
    assert state is not None and state["status"] == "stopped"
    assert not pid_alive(state["supervisor_pid"])
    assert run_cli("fleet", "status", str(profile)).returncode == 1


def test_rolling_reflag_during_a_run_changes_every_server(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    flags = {"time-scale": 1.0, "max-running-requests": 16}
    profile = write_profile(tmp_path / "fleet.yaml", state_dir, flags=flags)
    new_profile = write_profile(tmp_path / "fleet2.yaml", state_dir, flags={**flags, "max-running-requests": 24})
    n = 600
    job, out = fleet_job(tmp_path, state_dir, n, concurrency=16, sampling={"max_tokens": 32})
    run = subprocess.Popen([*TOKENMILL, "run", str(job), "--fleet", str(profile), "--no-live"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_lines(run, out, 40)
        started = time.time()
        applied = run_cli("fleet", "apply", str(new_profile), timeout=120)
        ended = time.time()
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "re-flag done" in applied.stdout and applied.stdout.count("up with the new flags") == 2
        assert run.poll() is None, "the run went on through the re-flag"
        urls = [s["url"] for s in read_json(state_dir / "state.json")["servers"]]  # type: ignore[index]
        for url in urls:
            with urllib.request.urlopen(url + "/server_info", timeout=5) as resp:
                assert json.loads(resp.read())["max_running_requests"] == 24
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)
            run.communicate()
    assert run.returncode == 0, err[-3000:]
    assert "stopping the fleet it started" in err
    done, failed = read_records(out)
    assert failed == [] and len(done) == n
    during = [r for r in done if started < r["finished_at"] < ended]
    assert during, "completions kept arriving during the re-flag"
    assert {r["server"] for r in done} == set(urls)
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0
    assert read_json(state_dir / "state.json")["status"] == "stopped"  # type: ignore[index]


def test_fleet_commands_without_a_fleet_say_what_to_do(tmp_path: Path) -> None:
    res = run_cli("fleet", "status", "--state-dir", str(tmp_path / "none"))
    assert res.returncode == 2 and "tokenmill fleet up" in res.stderr and "Traceback" not in res.stderr


def test_a_frozen_server_is_restarted_by_the_watchdog_and_the_run_loses_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    watchdog = {"interval_s": 0.3, "probe_timeout_s": 0.5, "probe_failures": 2, "stall_s": 0}
    flags = {"time-scale": 0.3, "max-running-requests": 16}
    profile = write_profile(tmp_path / "fleet.yaml", state_dir, flags=flags, watchdog=watchdog)
    res = run_cli("fleet", "up", str(profile), "--detach", timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        n = 300
        # one attempt per prompt: a request that spent an attempt on the frozen server would be a failure
        job, out = fleet_job(tmp_path, state_dir, n, concurrency=8, sampling={"max_tokens": 32})
        spec = yaml.safe_load(job.read_text())
        spec["retry"].update(max_attempts=1, read_timeout_s=300)
        job.write_text(yaml.safe_dump(spec))
        run = subprocess.Popen([*TOKENMILL, "run", str(job), "--no-live"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        wait_lines(run, out, 40)
        victim = read_json(state_dir / "state.json")["servers"][0]  # type: ignore[index]
        os.kill(victim["pid"], signal.SIGSTOP)  # alive, answering nothing, generating nothing
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        done, failed = read_records(out)
        assert failed == [] and len(done) == n
        after = read_json(state_dir / "state.json")["servers"][0]  # type: ignore[index]
        assert after["restarts"] == 1 and after["pid"] != victim["pid"] and after["state"] == "up"
        assert not pid_alive(victim["pid"])
        assert "is hung: its health probe got no answer 2 times in a row" in (state_dir / "supervisor.log").read_text()
        assert run_cli("verify", str(out), "--input", str(job)).returncode == 0
    finally:
        down = run_cli("fleet", "down", str(profile), timeout=60)
    assert down.returncode == 0, down.stderr
