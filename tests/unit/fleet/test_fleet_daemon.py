"""The supervisor's process management called from code: killing what a dead supervisor left, stopping when none
runs, and waiting for a re-flag (its progress, its failure, a supervisor that stops before it is done)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenmill.errors import ServerError
from tokenmill.fleet.daemon import kill_leftovers, stop, wait_apply
from tokenmill.fleet.state import STATE, FleetState, pid_alive, write_json

DEAD_PID = 2**22 + 12345  # above the kernel's pid_max: no such process


def _state(state_dir: Path, **fields: Any) -> None:
    write_json(state_dir / STATE, {"status": "ready", "servers": [], **fields})


def test_kill_leftovers_kills_this_machine_s_live_server_groups_only(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        servers = [(child.pid, None), (DEAD_PID, None), (os.getpid(), "10.0.0.2")]
        state = FleetState.from_json(
            {"servers": [{"index": i, "url": "-", "state": "up", "gpus": [], "pid": pid, "node": node}
                         for i, (pid, node) in enumerate(servers)]}
        )  # fmt: skip
        assert len(state.servers) == 3
        assert kill_leftovers(state) == 1
        assert child.wait(timeout=10) == -9
        assert pid_alive(os.getpid())  # a server on another node is its own node's business
    finally:
        if child.poll() is None:
            child.kill()


def test_stop_without_a_running_supervisor_still_kills_the_leftovers(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        _state(
            tmp_path,
            supervisor_pid=DEAD_PID,
            servers=[{"index": 0, "url": "-", "state": "up", "gpus": [], "pid": child.pid}],
        )
        stopped = stop(tmp_path, 5.0, sleep=lambda s: pytest.fail("nothing to wait for"))
        assert stopped.supervisor_pid is None and stopped.leftovers == 1
        assert child.wait(timeout=10) == -9
    finally:
        if child.poll() is None:
            child.kill()


class _Supervisor:
    """Writes the re-flag's progress into state.json one step per pause, as a supervisor would."""

    def __init__(self, state_dir: Path, request_id: str, steps: list[tuple[str, list[str]]], pid: int) -> None:
        self.state_dir, self.request_id, self.steps, self.pid = state_dir, request_id, steps, pid
        self.pauses = 0
        _state(state_dir, supervisor_pid=pid, apply={"id": "an-older-one", "state": "done", "progress": ["old"]})

    def sleep(self, seconds: float) -> None:
        self.pauses += 1
        if self.steps:
            state, progress = self.steps.pop(0)
            _state(self.state_dir, supervisor_pid=self.pid,
                   apply={"id": self.request_id, "state": state, "progress": progress})  # fmt: skip


def test_wait_apply_passes_on_each_new_line_once_and_returns_when_done(tmp_path: Path) -> None:
    sup = _Supervisor(tmp_path, "r1", [("running", ["[0] draining"]),
                                       ("running", ["[0] draining", "[0] up with the new flags"]),
                                       ("done", ["[0] draining", "[0] up with the new flags", "[1] up"])],
                      pid=os.getpid())  # fmt: skip
    said: list[str] = []
    lines = wait_apply(tmp_path, "r1", said.append, sleep=sup.sleep)
    assert said == ["[0] draining", "[0] up with the new flags", "[1] up"] == list(lines)
    assert sup.pauses == 3  # the older re-flag's lines were not shown


def test_wait_apply_raises_with_the_last_line_when_the_re_flag_fails(tmp_path: Path) -> None:
    sup = _Supervisor(tmp_path, "r2", [("failed", ["[0] draining", "[0] did not come up: exit 1"])], os.getpid())
    with pytest.raises(ServerError, match=r"re-flag r2 failed: \[0\] did not come up: exit 1"):
        wait_apply(tmp_path, "r2", lambda line: None, sleep=sup.sleep)


def test_wait_apply_stops_waiting_when_the_supervisor_is_gone(tmp_path: Path) -> None:
    sup = _Supervisor(tmp_path, "r3", [("running", ["[0] draining"])], pid=DEAD_PID)
    with pytest.raises(ServerError, match="supervisor stopped during re-flag r3"):
        wait_apply(tmp_path, "r3", lambda line: None, sleep=sup.sleep)
