"""The rolling re-flag on some servers only (an autotune canary, its roll-out and roll-back), with handles that
record their restarts: each server remembers the profile it runs; the fleet's profile follows once all do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import FleetSpec
from tokenmill.errors import ServerError
from tokenmill.fleet.state import STATE, ServerStatus, read_json
from tokenmill.fleet.supervisor import Fleet, ServerHandle


class Handle:
    """A server that restarts at once; flags containing ``refuse`` make it fail its start."""

    def __init__(self, index: int, profile: FleetSpec) -> None:
        self.index = index
        self.profile = profile
        self.restarts: list[dict[str, object]] = []

    def wait_started(self, timeout: float | None = None) -> str | None:
        return None

    def status(self) -> ServerStatus:
        # port 9 (discard) answers nothing: the drain gives up on /metrics after the notice
        return ServerStatus(
            self.index, f"http://127.0.0.1:9/{self.index}", "up", [self.index], flags=self.profile.flags
        )

    def restart(self, profile: FleetSpec, timeout: float | None = None) -> str | None:
        self.restarts.append(dict(profile.flags))
        if profile.flags.get("refuse"):
            return "exited with code 1"
        self.profile = profile
        return None

    def stop(self) -> None:
        return None


def fleet(tmp_path: Path) -> tuple[Fleet, list[Handle]]:
    profile = FleetSpec(engine="sim", model="m", gpus=3, base_port=0, drain_notice_s=0, drain_timeout_s=0,
                           state_dir=str(tmp_path / "state"), flags={"a": 1})  # fmt: skip
    handles: list[Handle] = []

    def launcher(p: FleetSpec, state_dir: Path) -> list[ServerHandle]:
        handles.extend(Handle(i, p) for i in range(3))
        return list(handles)

    return Fleet(profile, launcher).up(), handles


def test_a_canary_then_the_rest_then_the_fleets_profile(tmp_path: Path) -> None:
    f, handles = fleet(tmp_path)
    old = f.profile
    new = old.model_copy(update={"flags": {"a": 2}})
    try:
        f.apply(new, servers=[0])
        assert [h.restarts for h in handles] == [[{"a": 2}], [], []]
        assert f.profile == old and f.runs(0) == new and f.runs(1) == old
        state = read_json(Path(f.state_dir) / STATE)
        assert state is not None and state["reflagged"] == {"0": {"a": 2}} and state["profile"]["flags"] == {"a": 1}
        f.apply(new, servers=[0, 1, 2], batch=2)  # server 0 already runs it: only 1 and 2 restart, together
        assert [len(h.restarts) for h in handles] == [1, 1, 1]
        assert f.profile == new
        state = read_json(Path(f.state_dir) / STATE)
        assert state is not None and state["reflagged"] == {} and state["profile"]["flags"] == {"a": 2}
    finally:
        f.down()


def test_a_canary_rolled_back_and_a_server_that_refuses_the_flags(tmp_path: Path) -> None:
    f, handles = fleet(tmp_path)
    old = f.profile
    try:
        f.apply(old.model_copy(update={"flags": {"a": 2}}), servers=[1])
        f.apply(old, servers=[1])  # the roll-back
        assert handles[1].restarts == [{"a": 2}, {"a": 1}] and f.runs(1) == old and f.profile == old
        with pytest.raises(ServerError, match="re-flag stopped at server"):
            f.apply(old.model_copy(update={"flags": {"a": 1, "refuse": True}}), servers=[2])
        assert handles[2].restarts == [{"a": 1, "refuse": True}, {"a": 1}]  # started again with the old flags
        assert f.runs(2) == old
    finally:
        f.down()
