"""The start of a run when what it needs does not answer, through the whole CLI: server URLs that never answer
stop it within ``retry.startup_wait_s`` naming each URL and its error (nothing written); a store that refuses
connections is said in the log with its endpoint, what is retried and for how long, and ``tokenmill status``
shows the run as starting and waiting for the store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli, write_job, write_prompts
from tests.helpers.s3server import TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess


def refused_port() -> int:
    with socket.socket() as s:  # nobody listens there once it is closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_urls_that_never_answer_stop_the_run_naming_each(tmp_path: Path) -> None:
    dead, typo = f"http://127.0.0.1:{refused_port()}", "http://gpu-nod.invalid:30000"
    data = write_prompts(tmp_path / "in.jsonl", 5)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [dead, typo], data, out, retry={"startup_wait_s": 1, "probe_interval_s": 0.5}
    )
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "error: no server answered within retry.startup_wait_s (1 s): " in res.stderr
    assert f"{dead}: connection refused; {typo}: no such host" in res.stderr
    assert "Check the URLs (servers / servers_file" in res.stderr and "Traceback" not in res.stderr
    assert not (out / "job.json").exists()  # nothing written before a server answered


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_a_store_that_refuses_is_said_and_status_shows_the_run_waiting_for_it(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    endpoint = f"http://127.0.0.1:{refused_port()}"
    data = write_prompts(tmp_path / "in.jsonl", 5)
    out = tmp_path / "out"
    output = {
        "remote": "s3://bkt/run/",
        "storage_options": {"client_kwargs": {"endpoint_url": endpoint}},
        "upload": {"start_wait_s": 600},
    }
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, output=output)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **TEST_ENV},
    )
    log = out / "tokenmill.log"
    try:
        said = wait_for(
            "the store's refusal in the log",
            lambda: log.exists() and "does not answer (read s3://bkt/run/" in log.read_text(),
            alive=proc,
            log=log,
            timeout=120,
        )
        assert said
        text = log.read_text()
        assert (
            "WARNING tokenmill.run.remote: the store at s3://bkt/run/: no answer yet after 3 s (still trying)" in text
        )
        assert (
            "does not answer (read s3://bkt/run/_tokenmill_manifest.json failed: Could not connect to the endpoint "
            f'URL: "{endpoint}/' in text
        )
        assert (
            "retrying every 1-60 s (doubling) for up to output.upload.start_wait_s (600 s); then the run carries on"
            in text
        )
        status = run_cli("status", str(out))
        assert status.returncode == 0, status.stderr
        first = status.stdout.splitlines()[0]
        assert (
            first.startswith("starting (")
            and "waiting for the store at s3://bkt/run/, which does not answer (" in first
        )
        assert endpoint in first and "tries so far, the last failed" in first
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    gone = run_cli("status", str(out)).stdout.splitlines()[0]
    assert gone.startswith("interrupted: the process is gone (pid ") and "while it was starting" in gone, gone
