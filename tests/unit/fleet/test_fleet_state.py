"""``state.json`` and ``apply-request.json``: typed records, written by one writer and read by one reader."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tokenmill.config import FleetSpec
from tokenmill.errors import ServerError
from tokenmill.fleet.state import (
    ApplyProgress,
    FleetState,
    ServerStatus,
    load_state,
    read_request,
    request_apply,
    write_state,
)


def _state(pid: int | None, status: str = "ready") -> FleetState:
    server = ServerStatus(0, "http://127.0.0.1:30000", "up", [0], pid=123, flags={"tp": 1})
    return FleetState(
        supervisor_pid=pid,
        kind="local",
        status=status,
        started_at=1.5,
        endpoints_file="/x/endpoints.txt",
        profile={"engine": "sim", "model": "m"},
        servers=(server,),
        reflagged={"0": {"tp": 2}},
        apply=ApplyProgress("r1", "running", ("draining 0",)),
    )


def test_the_state_reads_back_as_written(tmp_path: Path) -> None:
    state = _state(os.getpid())
    write_state(tmp_path, state)
    assert load_state(tmp_path) == state
    assert orjson.loads((tmp_path / "state.json").read_bytes())["servers"][0]["url"] == "http://127.0.0.1:30000"


def test_a_state_with_odd_fields_reads_as_empty_ones(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_bytes(
        orjson.dumps({"supervisor_pid": True, "servers": [{"url": "x"}, 3], "apply": {"state": "?"}})
    )
    state = load_state(tmp_path)
    assert (state.supervisor_pid, state.servers, state.apply, state.running) == (None, (), None, False)


def test_no_state_says_how_to_start_a_fleet(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="fleet up"):
        load_state(tmp_path)


def test_a_reflag_request_reaches_the_supervisor_as_asked(tmp_path: Path) -> None:
    profile = FleetSpec.model_validate({"engine": "sim", "model": "m", "gpus": [0]})
    write_state(tmp_path, _state(None, "stopped"))
    with pytest.raises(ServerError, match="not running"):
        request_apply(tmp_path, profile)
    write_state(tmp_path, _state(os.getpid()))
    request_id = request_apply(tmp_path, profile, servers=[0], batch=2, drain_timeout_s=5.0)
    request = read_request(tmp_path)
    assert request is not None and (request.id, request.servers, request.batch, request.drain_timeout_s) == (
        request_id,
        [0],
        2,
        5.0,
    )
    assert FleetSpec.model_validate(request.profile) == profile
