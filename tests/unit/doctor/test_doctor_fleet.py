"""``tokenmill doctor --fleet PROFILE.yaml``: the planner's model and a twin's GPU from the profile, its servers
from the running fleet's endpoints file when none are given; options given on the command line win."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.errors import TokenmillError
from tokenmill.fleet.state import STATE, write_json


class Found:
    def as_dict(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    got: dict[str, Any] = {}

    async def checkup(urls: list[str], spec: Any, planning: Any, **kw: Any) -> Found:
        got.update(urls=urls, model=planning.model, gpu=planning.gpu)
        return Found()

    monkeypatch.setattr("tokenmill.doctor.checkup.checkup", checkup)
    return got


def twin_fleet(tmp: Path, up: bool) -> Path:
    state_dir = tmp / "fleet"
    path = tmp / "fleet.yaml"
    path.write_text(
        yaml.safe_dump(
            {"state_dir": str(state_dir), "engine": "sim", "model": "qwen3.6-27b", "gpus": 2,
             "flags": {"gpu": "rtx-pro-6000", "max-running-requests": 40}}
        )
    )  # fmt: skip
    if up:
        endpoints = tmp / "endpoints.txt"
        endpoints.write_text("http://127.0.0.1:31001\nhttp://127.0.0.1:31002\n")
        state_dir.mkdir()
        write_json(state_dir / STATE, {"status": "ready", "servers": [], "endpoints_file": str(endpoints)})
    return path


def test_the_fleet_profile_gives_the_model_the_gpu_and_the_servers(tmp_path: Path, seen: dict[str, Any]) -> None:
    res = CliRunner().invoke(cli, ["doctor", "--fleet", str(twin_fleet(tmp_path, up=True)), "--json"])
    assert res.exit_code == 0, res.output
    assert seen == {
        "urls": ["http://127.0.0.1:31001", "http://127.0.0.1:31002"],
        "model": "qwen3.6-27b",
        "gpu": "rtx-pro-6000",
    }


def test_options_given_win_over_the_profile(tmp_path: Path, seen: dict[str, Any]) -> None:
    fleet = twin_fleet(tmp_path, up=False)
    args = ["doctor", "--fleet", str(fleet), "--servers", "http://10.0.0.5:30000", "--gpu", "h100", "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert seen == {"urls": ["http://10.0.0.5:30000"], "model": "qwen3.6-27b", "gpu": "h100"}


def test_a_fleet_that_is_not_up_and_no_servers_says_what_to_do(tmp_path: Path, seen: dict[str, Any]) -> None:
    res = CliRunner().invoke(cli, ["doctor", "--fleet", str(twin_fleet(tmp_path, up=False))])
    assert isinstance(res.exception, TokenmillError) and not seen  # the entry point prints it, exit 2
    assert "tokenmill fleet up" in str(res.exception)
