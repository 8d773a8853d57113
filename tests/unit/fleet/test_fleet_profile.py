"""Fleet profiles, command templates, the endpoints file and how a run follows it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tokenmill.config import FleetSpec, load_profile
from tokenmill.errors import ConfigError
from tokenmill.fleet import endpoints
from tokenmill.fleet.endpoints import Endpoint
from tokenmill.fleet.supervisor import check_reflag
from tokenmill.fleet.template import Slot, flag_args, redact, render


def test_layout_splits_gpus_into_tp_groups() -> None:
    profile = FleetSpec(engine="sglang", model="m", gpus=[4, 5, 6, 7], tp_size=2)
    assert profile.servers() == 2
    assert profile.gpu_groups() == [(4, 5), (6, 7)]
    assert FleetSpec(engine="sim", model="m", gpus=3).gpu_groups() == [(0,), (1,), (2,)]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"gpus": 3, "tp_size": 2}, "tp_size=2"),
        ({"gpus": [0, 0]}, "distinct"),
        ({"gpus": 2, "base_port": 65535}, "65535"),
        ({"engine": "trt"}, "engine"),
    ],
)
def test_bad_profiles_name_the_field(tmp_path: Path, fields: dict[str, object], needle: str) -> None:
    import yaml

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"engine": "sim", "model": "m", **fields}))
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_default_templates_render_each_engine() -> None:
    flags: dict[str, str | int | float | bool | None] = {
        "mem-fraction-static": 0.9,
        "enable-metrics": True,
        "skipped": None,
        "--disable-radix-cache": True,
    }
    slot = Slot(index=1, gpus=(2, 3), host="0.0.0.0", port=30001)
    sglang = render(FleetSpec(engine="sglang", model="Qwen/Qwen3-8B", flags=flags, tp_size=2, gpus=4), slot)
    assert sglang[1:3] == ["-m", "sglang.launch_server"]
    assert sglang[sglang.index("--model-path") + 1] == "Qwen/Qwen3-8B"
    assert sglang[sglang.index("--port") + 1] == "30001" and sglang[sglang.index("--tp-size") + 1] == "2"
    assert sglang[-4:] == ["--mem-fraction-static", "0.9", "--enable-metrics", "--disable-radix-cache"]
    assert "--skipped" not in sglang
    vllm = render(FleetSpec(engine="vllm", model="m", python="/opt/venv/bin/python"), slot)
    assert vllm[:3] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    sim = render(FleetSpec(engine="sim", model="tokenmill-sim", extra_args=["--seed", "7"]), slot)
    assert sim[0] == sys.executable and sim[1:4] == ["-m", "tokenmill", "sim"] and sim[-2:] == ["--seed", "7"]


@pytest.mark.parametrize(
    ("engine", "version", "strategy", "graph_bs"),
    [
        ("sglang", "0.5.10", "--mamba-scheduler-strategy", "--cuda-graph-max-bs"),
        ("sglang", "0.5.23", "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
        ("sim", None, "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),  # the release it imitates
    ],
)
def test_renamed_flags_are_written_the_way_the_release_accepts(
    engine: str, version: str | None, strategy: str, graph_bs: str
) -> None:
    for given in ("mamba-scheduler-strategy", "mamba-radix-cache-strategy"):
        profile = FleetSpec.model_validate(
            {
                "engine": engine,
                "model": "m",
                "sglang_version": version,
                "flags": {given: "no_buffer", "cuda-graph-max-bs": 8},
                "extra_args": ["--mamba-scheduler-strategy=no_buffer"],
            }
        )
        argv = render(profile, Slot(0, (0,), "127.0.0.1", 1))
        assert argv[-5:] == [strategy, "no_buffer", graph_bs, "8", f"{strategy}=no_buffer"]


def test_custom_template_placeholders_and_errors() -> None:
    profile = FleetSpec(engine="sim", model="my model", command="run --gpus {gpus} --name 'x {index}' {model}")
    assert render(profile, Slot(3, (6, 7), "127.0.0.1", 9)) == ["run", "--gpus", "6,7", "--name", "x 3", "my model"]
    with pytest.raises(ConfigError, match=r"\{nope\}.*placeholders are"):
        render(profile.model_copy(update={"command": "run {nope}"}), Slot(0, (0,), "h", 1))


def test_redact_masks_secret_flag_values() -> None:
    shown = redact(["srv", "--api-key", "s3cret", "--admin-api-key=hush", "--port", "1"])
    assert "s3cret" not in shown and "hush" not in shown
    assert "--port 1" in shown and "--api-key ***" in shown
    assert flag_args({"a": False, "b": 1}) == ["--b", "1"]


def test_endpoints_file_round_trip_and_plain_servers_file(tmp_path: Path) -> None:
    from tokenmill.config import JobSpec
    from tokenmill.run.access import resolve_access

    path = tmp_path / "endpoints.txt"
    eps = [Endpoint("http://127.0.0.1:1"), Endpoint("http://127.0.0.1:2", "draining"), Endpoint("http://h:3", "down")]
    endpoints.write(path, eps)
    assert endpoints.read(path) == eps
    assert endpoints.read(tmp_path / "missing.txt") is None
    job = JobSpec.model_validate({"input": {"path": "x"}, "servers_file": str(path), "output": {"dir": "o"}})
    assert resolve_access(job).servers == [e.url for e in eps]  # a run that does not follow it still reads it


class FakeDispatcher:
    def __init__(self, urls: list[str]) -> None:
        self.drained = dict.fromkeys(urls, False)
        self.calls: list[tuple[str, bool]] = []

    def server_urls(self) -> dict[str, bool]:
        return dict(self.drained)

    def set_draining(self, url: str, draining: bool) -> None:
        self.drained[url] = draining
        self.calls.append((url, draining))

    def add_server(self, url: str) -> None:
        self.drained[url] = False


def test_apply_drains_adds_and_removes() -> None:
    target = FakeDispatcher(["http://a:1", "http://b:2", "http://c:3"])
    changes = endpoints.apply(
        target, [Endpoint("http://a:1"), Endpoint("http://b:2", "draining"), Endpoint("http://d:4", "down")]
    )
    assert target.drained == {"http://a:1": False, "http://b:2": True, "http://c:3": True, "http://d:4": True}
    assert len(changes) == 4
    target.calls.clear()
    assert endpoints.apply(target, [Endpoint("http://a:1"), Endpoint("http://b:2"), Endpoint("http://d:4")])
    assert target.calls == [("http://b:2", False), ("http://d:4", False)]
    assert endpoints.apply(target, [Endpoint("http://a:1"), Endpoint("http://b:2"), Endpoint("http://d:4")]) == []


async def test_follow_rereads_the_file_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.txt"
    endpoints.write(path, [Endpoint("http://a:1")])
    target = FakeDispatcher(["http://a:1"])
    task = asyncio.create_task(endpoints.follow(path, target, 0.01))
    try:
        endpoints.write(path, [Endpoint("http://a:1", "draining")])
        async with asyncio.timeout(5):
            while not target.drained["http://a:1"]:
                await asyncio.sleep(0.01)
        path.unlink()  # the fleet went away: the last known state stays
        endpoints.write(path, [Endpoint("http://a:1")])
        async with asyncio.timeout(5):
            while target.drained["http://a:1"]:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert target.calls == [("http://a:1", True), ("http://a:1", False)]


def test_reflag_may_change_what_runs_but_not_where() -> None:
    old = FleetSpec(engine="sim", model="m", gpus=2, flags={"a": 1})
    assert check_reflag(old, old.model_copy(update={"flags": {"a": 2}, "env": {"X": "1"}})) == ["flags", "env"]
    assert check_reflag(old, old) == []
    with pytest.raises(ConfigError, match="gpus"):
        check_reflag(old, FleetSpec(engine="sim", model="m", gpus=4))
