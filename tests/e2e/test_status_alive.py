"""``tokenmill status`` knows at once whether a run's process is alive: killed with -9 it is "interrupted: the
process is gone" at the next look, not "running" until its heartbeat goes stale."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli, write_job, write_prompts
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess


@pytest.mark.parametrize("fleet", [(1, ["--max-running-requests", "4"])], indirect=True)
def test_status_says_the_process_is_gone_right_after_a_kill(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 3000)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, concurrency=4)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        running = wait_for(
            "status: running",
            lambda: run_cli("status", str(out)).stdout,
            done=lambda text: text.startswith("running (last update"),
            alive=proc,
            timeout=120,
        )
        assert "interrupted" not in running
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    status = run_cli("status", str(out))
    assert status.returncode == 0, status.stderr
    first = status.stdout.splitlines()[0]
    assert first.startswith(f"interrupted: the process is gone (pid {proc.pid} on "), first
    assert first.endswith("no end record (rerun the same command to resume)"), first
