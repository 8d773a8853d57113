"""A detached supervisor started and stopped from code, as ``fleet up --detach`` and ``fleet down`` do: simulated
servers on 127.0.0.1, the supervisor in a session of its own."""

from __future__ import annotations

import os
import signal
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.helpers.waiting import wait_for
from tokenmill.errors import ServerError
from tokenmill.fleet.daemon import gone, start_detached, stop
from tokenmill.fleet.state import load_state, pid_alive


def _profile(tmp_path: Path, state_dir: Path, **fields: object) -> Path:
    path = tmp_path / "fleet.yaml"
    profile = {"engine": "sim", "model": "tokenmill-sim", "gpus": 2, "base_port": 0, "state_dir": str(state_dir),
               "start_timeout_s": 30, **fields}  # fmt: skip
    path.write_text(yaml.safe_dump(profile))
    return path


def test_a_supervisor_started_from_code_is_ready_and_stops_with_its_servers(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    ready = start_detached(_profile(tmp_path, state_dir), state_dir, 30)
    try:
        state = load_state(state_dir)
        assert state.supervisor_pid == ready.pid and os.getpgid(ready.pid) == ready.pid  # a session of its own
        urls = [s.url for s in state.servers]
        assert len(urls) == 2 and all(url in Path(ready.endpoints_file).read_text() for url in urls)
        for url in urls:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                assert resp.status == 200
        servers = [s.pid for s in state.servers]
    finally:
        stopped = stop(state_dir, 60)
    assert stopped.supervisor_pid == ready.pid and stopped.leftovers == 0
    assert gone(ready.pid)
    wait_for("the servers to end", lambda: not any(pid_alive(pid) for pid in servers), timeout=10)
    assert load_state(state_dir).status == "stopped"


def test_stop_kills_the_servers_of_a_supervisor_killed_outright(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    ready = start_detached(_profile(tmp_path, state_dir, gpus=1), state_dir, 30)
    servers = [s.pid for s in load_state(state_dir).servers]
    os.kill(ready.pid, signal.SIGKILL)
    wait_for("the supervisor to die", lambda: gone(ready.pid), timeout=10)
    stopped = stop(state_dir, 10)
    assert stopped.supervisor_pid is None and stopped.leftovers == 1
    wait_for("the server to die", lambda: not any(pid_alive(pid) for pid in servers), timeout=10)


def test_a_supervisor_that_cannot_start_says_why(tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    profile = _profile(tmp_path, state_dir, command="{python} -c 'import sys; sys.exit(7)'", start_timeout_s=5,
                       max_restarts=0)  # fmt: skip
    with pytest.raises(ServerError, match=r"supervisor\.log"):
        start_detached(profile, state_dir, 5)
