"""--autotune on fleets of twins of a 27B GDN hybrid (Qwen3.6-27B on RTX PRO 6000, SGLang's default flags, long
outputs): `run --fleet --autotune` tries the doctor's radix-off change on one server, keeps it and rolls it to the
others, reaching the per-server rate the change gave the canary on every server; `fleet tune` against twins whose
decode slows down under that change (unlike the planner's prediction) measures it and rolls it back, after a dry
run that changes nothing. No prompt is lost or recorded twice. (The full-size proof, 8 servers and the best
static configuration run on its own, is `make bench`'s autotune section.)"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.helpers.cli import read_records, run_cli, start_run, stop_run, write_job
from tests.helpers.waiting import wait_for
from tokenmill.autotune.actuators import refusal
from tokenmill.config import AutotuneSpec, PlannerSpec
from tokenmill.fleet.state import read_json
from tokenmill.monitor.events import EVENTS_FILE, read_events
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.planner import parse_flags
from tokenmill.planner.catalog import load_model
from tokenmill.planner.hardware import GpuCatalog
from tokenmill.planner.plan import Workload
from tokenmill.planner.whatif import what_if

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
MAX_TOKENS = 3000  # the job's sampling.max_tokens: what SGLang's admission charges each request
FAST = {"window_s": 6, "max_window_s": 18, "warmup_s": 2, "cooldown_s": 2, "min_remaining_s": 0, "max_changes": 1,
        "rollback_drain_s": 3}  # fmt: skip


def profile(tmp: Path, servers: int, **sim: Any) -> Path:
    path = tmp / "fleet.yaml"
    data = {
        "engine": "sim",
        "model": MODEL,
        "gpus": servers,
        "base_port": 0,
        "state_dir": str(tmp / "fleet"),
        "drain_notice_s": 0.3,
        "drain_timeout_s": 30,
        "start_timeout_s": 60,
        "flags": {"gpu": GPU, "time-scale": 0.02, "output-len-mean": 1500, "log-level": "warning", **sim},
        "autotune": {**FAST, "rollout_batch": servers - 1},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def prompts(path: Path, n: int) -> Path:
    with path.open("wb") as f:
        for i in range(n):
            f.write(orjson.dumps({"id": f"p{i:05d}", "prompt": f"Tell a long story about the number {i}."}) + b"\n")
    return path


def job(tmp: Path, n: int, **extra: Any) -> tuple[Path, Path]:
    out = tmp / "out"
    path = write_job(
        tmp / "job.yaml", [], prompts(tmp / "in.jsonl", n), out, model=MODEL, concurrency="auto",
        sampling={"max_tokens": MAX_TOKENS},
        monitor={"scrape_interval_s": 0.5, "event_interval_s": 0.5, "rate_window_s": 3},
        output={"dir": str(out), "shard_size": 200}, **extra,
    )  # fmt: skip
    return path, out


def steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "autotune" and r.get("step") != "note"]


def exactly_once(out: Path, n: int | None = None) -> None:
    done, failed = read_records(out)
    ids = [r["id"] for r in done]
    assert len(ids) == len(set(ids)) and not failed
    if n is not None:
        assert len(ids) == n
    check = run_cli("verify", str(out))
    assert check.returncode == 0, check.stdout + check.stderr


def best_allowed_cap(input_len: float, output_len: float) -> int:
    """The running cap of the best what-if row within the default allow-list (the best static configuration) for
    the job's requests: their lengths and their max_tokens."""
    work = Workload(10_000, input_len, output_len, max_tokens=MAX_TOKENS)
    rows = what_if(load_model(MODEL), GpuCatalog.load().get(GPU), parse_flags(""), work, PlannerSpec())
    best = next(r for r in rows if r.result is not None and refusal(r.command, AutotuneSpec().allow) is None)
    assert best.flags.disable_radix_cache and best.flags.max_running_requests is not None
    return best.flags.max_running_requests


def test_run_with_autotune_keeps_the_radix_off_change_and_every_server_gets_its_rate(tmp_path: Path) -> None:
    # enough for a steady part after the roll-out at the GDDR7 card's decode rate: the roll-out restarts three twin
    # processes, which beside two CPU hogs took 8 s (the run goes on meanwhile: 2,483 of 2,900 done 3 s after it),
    # and the fleet then answers about 150 prompts a second
    n = 4500
    job_file, out = job(tmp_path, n)
    fleet_file = profile(tmp_path, servers=4)
    res = run_cli("run", str(job_file), "--no-live", "--fleet", str(fleet_file), "--autotune", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    records = list(read_events(out / EVENTS_FILE))
    tuned = steps(records)
    assert [s["step"] for s in tuned] == ["canary", "canary-up", "keep", "rolled-out"], tuned
    canary, keep, rolled = tuned[0], tuned[2], tuned[3]
    change = canary["change"]
    assert change.startswith("--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests ")
    assert canary["predicted_gain"] > 1.5  # the planner: 15 running -> about 100
    measured = keep["measured"]
    assert measured["gain"] > 1.0 and measured["gain_vs_peers"] == measured["gain"]
    assert measured["gain"] - 2 * measured["stderr"] > AutotuneSpec().keep_gain
    # the change is the best static configuration the planner's what-if finds for this workload
    done, _ = read_records(out)
    input_len = sum(r["prompt_tokens"] for r in done) / len(done)
    output_len = sum(r["completion_tokens"] for r in done) / len(done)
    cap = int(change.split()[-1])
    assert abs(cap - best_allowed_cap(input_len, output_len)) <= 0.05 * cap
    # after the roll-out every server runs it, at the rate it gave the canary
    state = read_json(tmp_path / "fleet" / "state.json")
    assert state is not None and state["profile"]["flags"]["disable-radix-cache"] is True and state["reflagged"] == {}
    ticks = [Snapshot.from_event(r) for r in records if r["kind"] == "tick"]
    t0 = float(records[0]["t"])
    start = float(rolled["t"]) - t0 + 2.0
    steady = [t for t in ticks if start <= t.elapsed_s and t.done <= 0.9 * n]
    assert len(steady) >= 6 and steady[-1].elapsed_s - steady[0].elapsed_s >= 3.0, "no steady part after the roll-out"
    a, b = steady[0], steady[-1]
    rates = {
        sb.url: (sb.decoded_tokens - sa.decoded_tokens) / (b.elapsed_s - a.elapsed_s)
        for sa, sb in zip(a.servers, b.servers, strict=True)
    }
    # every server runs the change at the canary's rate, measured over the same window: the twins' simulated steps
    # are paced by the wall clock, and four twins answering at the new rate need more CPU than the canary did when
    # it was measured beside three slower peers (beside two CPU hogs each then ran 57-95 % of that measurement)
    assert len(rates) == 4 and min(rates.values()) >= 0.95 * rates[canary["canary"]], (rates, measured)
    # and the change pays on every server: well above the rate all four ran at before it
    assert min(rates.values()) >= 1.5 * measured["before_tok_s"], (rates, measured)
    exactly_once(out, n)
    assert any("autotune:" in (t.autotune or "") for t in ticks)
    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    html = (out / "report.html").read_text()
    assert "<h2>Autotune</h2>" in html and "rolled-out" in html
    # the kept flags are written beside the profile, the diff said, and a second `fleet up` of it starts with them
    kept = tmp_path / "fleet.tuned.yaml"
    assert f"autotune's kept flags written to {kept}" in res.stderr and f"+ --max-running-requests {cap}" in res.stderr
    up = run_cli("fleet", "up", str(fleet_file), "--detach", timeout=120)
    assert up.returncode == 0 and f"{kept} holds the flags autotune kept" in up.stderr, up.stderr
    down = run_cli("fleet", "down", str(fleet_file), timeout=120)
    assert down.returncode == 0, down.stderr
    up = run_cli("fleet", "up", str(kept), "--detach", timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        urls = [s["url"] for s in (read_json(tmp_path / "fleet" / "state.json") or {})["servers"]]
        infos = [server_info(u) for u in urls]
        assert len(infos) == 4
        assert all(i["disable_radix_cache"] is True and i["max_running_requests"] == cap for i in infos), infos
    finally:
        run_cli("fleet", "down", str(kept), timeout=120)


def server_info(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/server_info", timeout=10) as resp:
        info: dict[str, Any] = json.loads(resp.read())
    return info


@pytest.fixture
def slow_radix_off_fleet(tmp_path: Path) -> Any:
    """Three twins whose decode is 4x slower with the radix cache off than the planner says, up in the background."""
    fleet_file = profile(tmp_path, servers=3, **{"flag-slowdown": "disable-radix-cache=4"})
    up = run_cli("fleet", "up", str(fleet_file), "--detach", timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        yield fleet_file
    finally:
        run_cli("fleet", "down", str(fleet_file), timeout=120)


def test_fleet_tune_rolls_back_a_change_that_does_not_pay(slow_radix_off_fleet: Path, tmp_path: Path) -> None:
    state_dir = tmp_path / "fleet"
    job_file, out = job(tmp_path, 4000, servers_file=str(state_dir / "endpoints.txt"), servers_file_poll_s=0.1)
    urls = [s["url"] for s in (read_json(state_dir / "state.json") or {})["servers"]]
    run = start_run(job_file)
    try:
        wait_for("the run's first ticks", lambda: (out / EVENTS_FILE).exists(), timeout=60)
        dry = run_cli("fleet", "tune", str(slow_radix_off_fleet), "--dry-run", "--changes", "1", "--output", str(out),
                      timeout=120)  # fmt: skip
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert "--disable-radix-cache" in dry.stdout and ": would apply (predicted +" in dry.stdout, dry.stdout
        assert all(server_info(u)["disable_radix_cache"] is False for u in urls)  # the dry run changed nothing
        tune = run_cli("fleet", "tune", str(slow_radix_off_fleet), "--changes", "1", "--output", str(out), timeout=240)
        assert tune.returncode == 0, tune.stderr[-3000:]
        assert ": rolled back (predicted +" in tune.stdout, tune.stdout + tune.stderr[-2000:]
    finally:
        stop_run(run)
    logged = [json.loads(line) for line in (state_dir / "autotune.jsonl").read_text().splitlines()]
    tried = [s for s in steps(logged) if s["step"] not in ("would-apply", "extended")]
    assert [s["step"] for s in tried] == ["canary", "canary-up", "roll-back", "rolled-back"], tried
    back = tried[2]
    measured = back["measured"]
    assert back["predicted_gain"] > 1.0 and back["reason"] == "it does not pay"
    assert measured["gain"] + 2 * measured["stderr"] < AutotuneSpec().keep_gain and measured["gain_vs_peers"] < 0
    assert all(server_info(u)["disable_radix_cache"] is False for u in urls)  # every server runs the old flags
    state = read_json(state_dir / "state.json")
    assert state is not None and state["reflagged"] == {} and "disable-radix-cache" not in state["profile"]["flags"]
    exactly_once(out)
