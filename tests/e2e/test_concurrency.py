"""``concurrency: auto`` against simulated servers: the target settles at what a server runs plus a small
queue, backs off while the server answers 429 and comes back after, and a fixed number stays fixed."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import TOKENMILL, read_records, stop_run, write_job, write_prompts
from tests.helpers.waiting import wait_for
from tokenmill.config import ControlSpec
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.monitor.events import EVENTS_FILE, read_events
from tokenmill.run.control import queue_for

CAP = 24
SETTLED = CAP + queue_for(CAP, ControlSpec())  # 28: the cap and a queue of queue_min
FAST_MONITOR = {"scrape_interval_s": 0.2, "event_interval_s": 0.2, "rate_window_s": 1.0}
# ~64-token answers at 1/20 of real time: a few hundred requests per second at the cap
SIM = ["--max-running-requests", str(CAP), "--output-len-mean", "64", "--output-len-sigma", "0"]


def limits(out: Path) -> list[int]:
    """The first server's in-flight target in every tick of the event log so far."""
    path = out / EVENTS_FILE
    if not path.exists():
        return []
    return [r["servers"][0]["limit"] for r in read_events(path) if r["kind"] == "tick" and r["servers"]]


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        stop_run(proc)


def start(job: Path, procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*TOKENMILL, "run", str(job), "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    procs.append(proc)
    return proc


def set_faults(sim: SimProcess, **spec: float) -> None:
    req = urllib.request.Request(
        f"{sim.url}/sim/faults", data=json.dumps(spec).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("fleet", [(1, SIM)], indirect=True)
def test_auto_settles_at_cap_plus_queue_backs_off_on_429_and_recovers(
    fleet: list[SimProcess], tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    n = 20_000  # far more than the test needs: it stops the run itself
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [fleet[0].url], data, out, concurrency="auto", monitor=FAST_MONITOR,
        sampling={"max_tokens": 64},
    )  # fmt: skip
    proc = start(job, running)
    wait_for("the target to settle at the cap plus a queue", lambda: limits(out)[-3:] == [SETTLED] * 3)

    set_faults(fleet[0], rate_limit_rate=0.5)
    low = wait_for("a throttled target", lambda: [x for x in limits(out)[-1:] if x <= SETTLED // 2])
    assert low[0] >= 1
    set_faults(fleet[0])  # no faults
    wait_for("the target to come back", lambda: limits(out)[-3:] == [SETTLED] * 3)

    proc.send_signal(signal.SIGINT)  # stop: in-flight requests finish, everything recorded stays
    proc.wait(60)
    done, failed = read_records(out)
    assert done and not failed  # 429s were retried, never recorded as failures
    assert len({r["id"] for r in done}) == len(done)


@pytest.mark.parametrize("fleet", [(1, SIM)], indirect=True)
def test_a_fixed_concurrency_stays_fixed(
    fleet: list[SimProcess], tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 2000)  # long enough for several monitor ticks on any machine
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [fleet[0].url], data, out, concurrency=16, monitor=FAST_MONITOR,
        sampling={"max_tokens": 64},
    )  # fmt: skip
    proc = start(job, running)
    assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    seen = limits(out)
    assert len(seen) >= 3 and set(seen) == {16}
    done, _ = read_records(out)
    assert len(done) == 2000
