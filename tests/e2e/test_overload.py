"""A full simulated server with a queue and a short read timeout: requests that wait in its queue longer than
the read timeout are overload, not a dead server. The run finishes with no server set aside, nothing failed,
the in-flight cap lowered, the abandoned tokens counted, and a warning at start about the concurrency."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import read_records, run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.monitor.events import EVENTS_FILE, read_events

CAP = 4
# 64-token answers at 1/20 of real time: ~65 ms each, 4 at once: ~60 answers a second. 64 in flight queue ~60,
# a second of waiting for the last of them, against a read timeout of 0.4 s.
SIM = ["--max-running-requests", str(CAP), "--output-len-mean", "64", "--output-len-sigma", "0"]
FAST_MONITOR = {"scrape_interval_s": 0.2, "event_interval_s": 0.2, "rate_window_s": 1.0}


@pytest.mark.parametrize("fleet", [(1, SIM)], indirect=True)
def test_a_full_server_with_a_short_read_timeout_finishes_with_no_server_set_aside(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    n = 400
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [fleet[0].url], data, out, concurrency=64, monitor=FAST_MONITOR,
        retry={"read_timeout_s": 0.4, "max_attempts": 2, "quarantine_after": 3, "backoff_base_s": 0.01,
               "backoff_max_s": 0.2, "probe_interval_s": 0.2},
    )  # fmt: skip
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "setting server" not in res.stderr and "not usable" not in res.stderr, res.stderr
    assert "sends 64 requests at once to servers that run 4" in res.stderr  # the warning at start
    done, failed = read_records(out)
    assert not failed  # timeouts in the queue spent no attempt (max_attempts 2)
    assert sorted(r["id"] for r in done) == [f"p{i:05d}" for i in range(n)]
    ticks = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    assert all(row["usable"] for t in ticks for row in t["servers"])
    last = ticks[-1]
    assert last["client"]["abandoned"] > 0 and last["client"]["abandoned_tokens"] > 0
    assert last["servers"][0]["timeouts"] == last["client"]["abandoned"]
    assert last["servers"][0]["limit"] < 64  # backed off
    summary = (out / "summary.md").read_text()
    assert "| abandoned on read timeouts (overload) | " in summary and "tokens wasted" in summary
