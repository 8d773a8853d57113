"""`tokenmill demo` (what `make demo` runs), on a slice of the bundled sample."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import orjson

from tests.helpers.cli import TOKENMILL, run_cli
from tests.helpers.waiting import wait_for


def test_demo_completes_and_names_the_binding_resource(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = run_cli("demo", "--server-count", "2", "--limit", "300", "-o", str(out), "--no-live", timeout=240)
    assert res.returncode == 0, res.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["finished"] and summary["completed_total"] == 300
    assert "doctor" in res.stdout or "binding resource" in res.stdout  # the summary carries the diagnosis
    assert run_cli("verify", str(out)).returncode == 0
    # the quality loop: the twins spoil a few answers, the demo finds them and answers them again
    assert "answering the degenerate ones again" in res.stderr
    moved = re.search(r"round-001 \(--where degenerate\): degenerate ([\d,]+) -> ([\d,]+) live answers", res.stdout)
    assert moved is not None, res.stdout
    before, after = (int(g.replace(",", "")) for g in moved.groups())
    assert before > 0 and after < before / 3
    assert (out / "regenerate" / "round-001.json").exists()
    # a second demo starts over instead of finding everything done
    again = run_cli("demo", "--server-count", "1", "--limit", "20", "-o", str(out), "--no-live", timeout=240)
    assert again.returncode == 0, again.stderr
    assert orjson.loads((out / "summary.json").read_bytes())["completed_total"] == 20


def test_a_demo_killed_in_its_first_seconds_does_not_block_the_next(tmp_path: Path) -> None:
    """Killed before its first record, the demo leaves only a server log; the next demo must start over."""
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [*TOKENMILL, "demo", "--server-count", "1", "--limit", "20", "-o", str(out), "--no-live"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # the simulated server is starting: nothing recorded yet
        wait_for("the demo's simulated server to start", (out / "sim-0.log").exists, every_s=0.01, alive=proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (out / "job.json").exists()
    again = run_cli("demo", "--server-count", "1", "--limit", "20", "-o", str(out), "--no-live", timeout=240)
    assert again.returncode == 0, again.stderr
    assert orjson.loads((out / "summary.json").read_bytes())["completed_total"] == 20


def test_the_demo_leaves_a_directory_it_does_not_own_alone(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("not the demo's")
    res = run_cli("demo", "--server-count", "1", "--limit", "5", "-o", str(out), "--no-live", timeout=120)
    assert res.returncode == 2 and "is not a tokenmill output" in res.stderr and "Traceback" not in res.stderr
    assert (out / "notes.txt").read_text() == "not the demo's"
