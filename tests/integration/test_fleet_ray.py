"""The fleet on a local Ray cluster with fake GPUs: actors reserve GPU groups, a restarted actor's new port
reaches the endpoints file, and two partition clients complete one output that verifies as a whole."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.fleet import ENV_SERVER
from tests.helpers.s3server import S3
from tests.helpers.waiting import wait_for
from tokenmill.config import FleetSpec, JobSpec
from tokenmill.fleet import endpoints
from tokenmill.fleet.ray import ray_fleet
from tokenmill.output import verify
from tokenmill.output.layout import list_dir
from tokenmill.run.partitions import run_partitions
from tokenmill.sources.partition import partition_of

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One single-node cluster for the module: 2 CPUs, 4 fake GPUs, no dashboard, a small object store."""
    keys = ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "RAY_TMPDIR", "RAY_memory_monitor_refresh_ms")
    saved = {k: os.environ.get(k) for k in keys}
    tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths must stay under 107 bytes
    # Ray's memory monitor kills workers when the whole machine is 95 % full: on a test machine busy with other
    # work (engine servers, other jobs) that is not this test's doing, so the monitor is off for this cluster
    os.environ.update(
        RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=tmp, RAY_memory_monitor_refresh_ms="0"
    )
    ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def two_sims(tmp_path: Path) -> FleetSpec:
    """Two simulated servers on Ray, fast enough for a few hundred prompts."""
    return FleetSpec(
        engine="sim",
        model="tokenmill-sim",
        gpus=2,
        base_port=0,
        flags={"time-scale": 0.05, "max-running-requests": 32},
        state_dir=str(tmp_path / "fleet"),
    )


def test_actors_reserve_gpu_groups_and_a_restarted_actor_is_followed(cluster: None, tmp_path: Path) -> None:
    script = tmp_path / "env_server.py"
    script.write_text(ENV_SERVER)
    profile = FleetSpec(
        engine="sim",
        model="unused",
        command=f"{{python}} {script} {{host}} {{port}} {{flags}}",
        gpus=4,
        tp_size=2,
        base_port=0,
        max_restarts=2,
        state_dir=str(tmp_path / "fleet"),
    )
    with ray_fleet(profile, "unused: already connected") as fleet:
        statuses = fleet.statuses()
        assert [s.state for s in statuses] == ["up", "up"] and all(s.node for s in statuses)
        visible = [get_json(s.url)["cvd"] for s in statuses]
        assert sorted(visible) == ["0,1", "2,3"]  # Ray's assignment, inherited by each server
        assert sorted(g for s in statuses for g in s.gpus) == [0, 1, 2, 3]
        assert ray.available_resources().get("GPU", 0) == 0
        assert ray.available_resources().get("CPU") == 2  # GPU actors hold no CPU
        old_url = statuses[0].url
        ray.kill(fleet.handles[0].actor, no_restart=False)  # type: ignore[attr-defined]
        # Ray restarts the actor; its server comes back on a new port, and the endpoints file follows
        wait_for(
            "the restarted actor up at a new address",
            lambda: fleet.statuses()[0].state == "up" and fleet.statuses()[0].url != old_url,
        )
        new_url = fleet.statuses()[0].url
        wait_for(
            "the new address in the endpoints file",
            lambda: endpoints.Endpoint(new_url) in (endpoints.read(fleet.endpoints_path) or []),
        )
        assert old_url not in [e.url for e in endpoints.read(fleet.endpoints_path) or []]
        assert get_json(new_url)["cvd"] in ("0,1", "2,3")
    wait_for("every GPU given back", lambda: ray.available_resources().get("GPU", 0) == 4)


def write_input(path: Path, n: int) -> Path:
    with path.open("wb") as f:
        for i in range(n):
            f.write(orjson.dumps({"id": f"p{i:05d}", "prompt": f"Say something about {i}."}) + b"\n")
    return path


def test_partitions_complete_one_output_that_verifies_and_resume_with_another_count(
    cluster: None, tmp_path: Path
) -> None:
    profile = two_sims(tmp_path)
    data = write_input(tmp_path / "in.jsonl", 300)
    out = tmp_path / "out"
    with ray_fleet(profile, "unused") as fleet:
        spec: dict[str, Any] = {
            "input": {"path": str(data), "id_field": "id", "limit": 180},
            "servers_file": str(fleet.endpoints_path),
            "model": "tokenmill-sim",
            "sampling": {"max_tokens": 16},
            "concurrency": 16,
            "output": {"dir": str(out), "shard_size": 40},
        }
        first = run_partitions(JobSpec.model_validate(spec), 2, "unused")
        assert [r.finished for r in first] == [True, True] and sum(r.completed for r in first) == 180
        assert {r.index: r.completed for r in first} == dict(Counter(partition_of(f"p{i:05d}", 2) for i in range(180)))
        listing = list_dir(out)
        assert listing.partitions == {0, 1} and not listing.sealed  # partition files only
        assert (out / "manifest.p000.jsonl").exists() and (out / "manifest.p001.jsonl").exists()
        # the rest of the input with three clients: ids done by the first two are not done again
        spec["input"].pop("limit")
        second = run_partitions(JobSpec.model_validate(spec), 3, "unused")
        shown = "; ".join(map(str, second))  # each partition's end, its error included
        assert [r.finished for r in second] == [True, True, True] and sum(r.completed for r in second) == 120, shown
    report = verify(out, (f"p{i:05d}" for i in range(300)))
    assert report.ok, report.render()
    assert report.counts["sealed_records"] + report.counts["open_records"] == 300
    assert report.counts["duplicates"] == 0 and report.counts["missing"] == 0
    assert list_dir(out).partitions == {0, 1, 2}


def test_run_cli_with_a_ray_fleet_and_two_partitions(cluster: None, tmp_path: Path) -> None:
    import yaml

    from tests.helpers.cli import run_cli

    state_dir = tmp_path / "fleet"
    profile = tmp_path / "fleet.yaml"
    flags = {"time-scale": 0.05}
    profile.write_text(yaml.safe_dump({"engine": "sim", "model": "tokenmill-sim", "gpus": 2, "base_port": 0,
                                       "flags": flags, "state_dir": str(state_dir)}))  # fmt: skip
    data = write_input(tmp_path / "in.jsonl", 120)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "input": {"path": str(data), "id_field": "id"}, "servers_file": str(state_dir / "endpoints.txt"),
        "model": "tokenmill-sim", "sampling": {"max_tokens": 16}, "concurrency": 8,
        "output": {"dir": str(tmp_path / "out"), "shard_size": 25},
    }))  # fmt: skip
    address = ray.get_runtime_context().gcs_address
    res = run_cli("run", str(job), "--fleet", str(profile), "--ray-address", address, "--partitions", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "partition 0/2: finished" in res.stdout and "partition 1/2: finished" in res.stdout
    assert "OK: every sealed shard matches the manifest" in res.stdout
    assert run_cli("verify", str(tmp_path / "out"), "--input", str(job)).returncode == 0
    state = json.loads((state_dir / "state.json").read_text())
    assert state["kind"] == "ray" and state["status"] == "stopped"
    wait_for("every GPU given back", lambda: ray.available_resources().get("GPU", 0) == 4)


def test_partitions_with_a_remote_need_no_shared_directory(cluster: None, s3: S3, tmp_path: Path) -> None:
    from tokenmill.storage.audit import audit_prefix
    from tokenmill.storage.store import Store

    profile = two_sims(tmp_path)
    data = write_input(tmp_path / "in.jsonl", 300)
    with ray_fleet(profile, "unused") as fleet:
        options = {**s3.options(), "key": "testing", "secret": "testing"}  # the Ray workers' environment is older
        spec: dict[str, Any] = {
            "input": {"path": str(data), "id_field": "id", "limit": 180},
            "servers_file": str(fleet.endpoints_path),
            "model": "tokenmill-sim",
            "sampling": {"max_tokens": 16},
            "concurrency": 16,
            "output": {"dir": str(tmp_path / "cluster-a"), "shard_size": 40, "remote": s3.url("ray/"),
                       "storage_options": options, "upload": {"manifest_interval_s": 0.5, "side_interval_s": 0.5}},
        }  # fmt: skip
        first = run_partitions(JobSpec.model_validate(spec), 2, "unused")
        assert [r.finished for r in first] == [True, True] and sum(r.completed for r in first) == 180
        shutil.rmtree(tmp_path / "cluster-a")  # the nodes and their disks are gone; the prefix is what is left
        spec["input"].pop("limit")
        spec["output"]["dir"] = str(tmp_path / "cluster-b")
        grown = JobSpec.model_validate(spec)  # the input grew after _SUCCESS: never reopened unless asked
        refused = run_partitions(grown, 3, "unused")
        assert not any(r.finished for r in refused) and all("--reopen" in (r.error or "") for r in refused), refused
        second = run_partitions(grown, 3, "unused", reopen="--reopen")
        shown = "; ".join(map(str, second))  # each partition's end, its error included
        assert [r.finished for r in second] == [True, True, True] and sum(r.completed for r in second) == 120, shown
        store = Store(s3.url("ray/"), options)
        report = audit_prefix(store, (f"p{i:05d}" for i in range(300)))
        assert report.ok, report.render()
        assert report.counts["sealed_records"] == 300 and store.read("_SUCCESS") is not None
