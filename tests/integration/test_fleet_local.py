"""The local fleet launcher with real processes on 127.0.0.1: layout, logs, start failures, crash restarts,
giving up, re-flags and their rollback."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fleet import ENV_SERVER
from tests.helpers.waiting import wait_for
from tokenmill.config import FleetSpec
from tokenmill.errors import ServerError
from tokenmill.fleet import endpoints
from tokenmill.fleet.local import local_fleet
from tokenmill.fleet.state import STATE, read_json


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture
def env_profile(tmp_path: Path) -> FleetSpec:
    script = tmp_path / "env_server.py"
    script.write_text(ENV_SERVER)
    return FleetSpec(
        engine="sim",
        model="unused",
        command=f"{{python}} {script} {{host}} {{port}} {{flags}}",
        gpus=[0, 1, 2, 3],
        tp_size=2,
        base_port=0,
        env={"MARKER": "m1"},
        start_timeout_s=20,
        restart_backoff_s=0.05,
        drain_notice_s=0.05,
        drain_timeout_s=2,
        state_dir=str(tmp_path / "fleet"),
    )


def test_each_server_gets_its_gpus_port_and_log(env_profile: FleetSpec, tmp_path: Path) -> None:
    with local_fleet(env_profile.model_copy(update={"flags": {"x": 1}})) as fleet:
        urls = fleet.urls()
        assert len(urls) == 2 and len(set(urls)) == 2
        answers = [get_json(u) for u in urls]
        assert [a["cvd"] for a in answers] == ["0,1", "2,3"]
        assert all(a["args"] == ["--x", "1"] and a["marker"] == "m1" for a in answers)
        assert endpoints.read(fleet.endpoints_path) == [endpoints.Endpoint(u) for u in urls]
        state = read_json(fleet.state_dir / STATE)
        assert state is not None and state["status"] == "ready" and state["supervisor_pid"] == os.getpid()
        assert "env server starting" in (fleet.state_dir / "server-1.log").read_text()
    state = read_json(tmp_path / "fleet" / STATE)
    assert state is not None and state["status"] == "stopped"
    assert endpoints.read(tmp_path / "fleet" / "endpoints.txt") == []
    assert all(s["state"] == "stopped" for s in state["servers"])


def test_a_server_that_cannot_start_stops_the_fleet_with_its_log_tail(tmp_path: Path) -> None:
    profile = FleetSpec(
        engine="sim",
        model="tokenmill-sim",
        gpus=2,
        base_port=0,
        flags={"max-running-requests": "many"},
        state_dir=str(tmp_path / "fleet"),
    )
    fleet = local_fleet(profile)
    with pytest.raises(ServerError) as err:
        fleet.up()
    text = str(err.value)
    assert "2 of 2 servers did not start" in text and "exited with code 2" in text
    assert "Invalid value for '--max-running-requests'" in text and "server-0.log" in text
    assert read_json(tmp_path / "fleet" / STATE)["status"] == "failed"  # type: ignore[index]


def test_a_second_fleet_on_the_same_state_dir_is_refused(env_profile: FleetSpec) -> None:
    with local_fleet(env_profile), pytest.raises(ServerError, match="already runs"):
        local_fleet(env_profile).up()


def test_a_crashed_server_is_restarted_on_the_same_url(env_profile: FleetSpec) -> None:
    with local_fleet(env_profile) as fleet:
        before = fleet.statuses()[1]
        assert before.pid is not None
        os.kill(before.pid, signal.SIGKILL)
        wait_for(
            "the killed server restarted",
            lambda: fleet.statuses()[1].restarts == 1 and fleet.statuses()[1].state == "up",
            30,
        )
        after = fleet.statuses()[1]
        assert after.url == before.url and after.pid != before.pid
        assert get_json(after.url)["cvd"] == "2,3"
        assert "exited with code -9" in (after.error or "") or after.error is None
        assert fleet.statuses()[0].restarts == 0


def test_a_server_crashing_again_and_again_is_given_up(env_profile: FleetSpec) -> None:
    profile = env_profile.model_copy(update={"gpus": [0], "tp_size": 1, "max_restarts": 2})
    with local_fleet(profile) as fleet:
        fleet.handles[0].restart(profile.model_copy(update={"flags": {"exit-after": 0.3}}))
        wait_for("the server marked failed", lambda: fleet.statuses()[0].state == "failed", 30)
        st = fleet.statuses()[0]
        assert st.restarts == 2 and "gave up after 2 restarts in a row" in (st.error or "")
        wait_for(
            "the endpoints file to mark it down",
            lambda: endpoints.read(fleet.endpoints_path) == [endpoints.Endpoint(st.url, "down")],
            30,
        )


def test_reflag_restarts_each_server_with_the_new_flags(env_profile: FleetSpec) -> None:
    with local_fleet(env_profile) as fleet:
        urls = fleet.urls()
        said: list[str] = []
        fleet.apply(env_profile.model_copy(update={"flags": {"mem": 0.9}, "env": {"MARKER": "m2"}}), said.append)
        assert [get_json(u) for u in urls] == [
            {"cvd": "0,1", "args": ["--mem", "0.9"], "marker": "m2"},
            {"cvd": "2,3", "args": ["--mem", "0.9"], "marker": "m2"},
        ]
        assert fleet.urls() == urls and [s.generation for s in fleet.statuses()] == [1, 1]
        assert any("server 1" in line and "new flags" in line for line in said)
        assert read_json(fleet.state_dir / STATE)["profile"]["flags"] == {"mem": 0.9}  # type: ignore[index]


def test_a_reflag_that_fails_puts_the_old_flags_back(env_profile: FleetSpec) -> None:
    assert env_profile.command is not None
    with local_fleet(env_profile) as fleet:
        bad = env_profile.model_copy(update={"command": env_profile.command + " --exit-after 0", "flags": {"b": 1}})
        with pytest.raises(ServerError, match="re-flag stopped at server 0") as err:
            fleet.apply(bad)
        assert "it runs the old flags again" in str(err.value)
        assert [s.state for s in fleet.statuses()] == ["up", "up"]
        assert [get_json(u)["args"] for u in fleet.urls()] == [[], []]
        assert endpoints.read(fleet.endpoints_path) == [endpoints.Endpoint(u) for u in fleet.urls()]
