"""``tokenmill status`` (the command, on files) judges a run without an end record by its writer lock: a process
gone on this host is interrupted at once; a run on another host by its heartbeat; a run still starting (no
job.json yet) shows what it waits for."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import orjson
from click.testing import CliRunner

from tests.helpers.watch import write_out
from tokenmill.cli import cli
from tokenmill.output.holder import Holder

GONE_PID = 2**22 + 4321  # above any pid_max: no process has it


def lock(out: Path, holder: Holder) -> None:
    (out / ".lock").write_bytes(f"{holder.pid}\n".encode() + holder.about())


def status_line(out: Path) -> str:
    res = CliRunner().invoke(cli, ["status", str(out)])
    assert res.exit_code == 0, res.output
    return res.output.splitlines()[0]


def test_a_gone_process_on_this_host_is_interrupted_at_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_out(out, end=False, tick_age=2.0)  # its last tick is fresh
    lock(out, dataclasses.replace(Holder.me(), pid=GONE_PID, phase="running", since=time.time()))
    line = status_line(out)
    assert line.startswith(f"interrupted: the process is gone (pid {GONE_PID} on ") and "no longer runs)" in line


def test_another_host_s_run_is_judged_by_its_heartbeat(tmp_path: Path) -> None:
    elsewhere = dataclasses.replace(Holder.me(), pid=GONE_PID, host="gpu-node-7", phase="running")
    fresh, stale = tmp_path / "fresh", tmp_path / "stale"
    write_out(fresh, end=False, tick_age=2.0)
    lock(fresh, elsewhere)
    assert status_line(fresh).startswith("running (last update")  # its pid means nothing here
    write_out(stale, end=False, tick_age=3600.0)
    lock(stale, elsewhere)
    assert status_line(stale).startswith("interrupted: no update for 1h")


def test_a_run_still_starting_shows_what_it_waits_for_before_job_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    waiting = {"on": "store", "where": "s3://bkt/run/", "error": "connection refused", "tries": 3, "at": time.time()}
    lock(out, dataclasses.replace(Holder.me(), phase="starting", since=time.time() - 20, waiting=waiting))
    line = status_line(out)
    assert line.startswith("starting (")
    assert line.endswith(
        "waiting for the store at s3://bkt/run/, which does not answer (connection refused; 3 tries so far, the last "
        "failed 0s ago)"
    )
    data = orjson.loads(CliRunner().invoke(cli, ["status", str(out), "--json"]).output)
    assert data["state"] == "starting"
