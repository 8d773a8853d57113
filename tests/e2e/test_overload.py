"""A full simulated server with a queue and a short read timeout: requests that wait in its queue longer than
the read timeout are overload, not a dead server. The run finishes with no server set aside, nothing failed,
the in-flight cap lowered, the abandoned tokens counted, and a warning at start about the concurrency.

And overload costs nothing: the twin of a 27B hybrid on an RTX PRO 6000 sent ``concurrency: 256`` (as the examples
show) with a read timeout of 180 s of GPU time, against answers of ~270 tokens (a tenth of the seed's, with the read
timeout a tenth of 1,800 s): the fixed concurrency is a ceiling, each server is sent what it runs plus a small
queue, and the tokens its own decode counter (``sglang:realtime_tokens_total{mode="decode"}``) counts are, within
2 %, the tokens delivered."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.monitor.events import EVENTS_FILE, read_events

CAP = 4
# 64-token answers at 1/20 of real time: ~65 ms each, 4 at once: ~60 answers a second. 64 in flight queue ~60,
# a second of waiting for the last of them, against a read timeout of 0.4 s.
SIM = ["--max-running-requests", str(CAP), "--output-len-mean", "64", "--output-len-sigma", "0"]
FAST_MONITOR = {"scrape_interval_s": 0.2, "event_interval_s": 0.2, "rate_window_s": 1.0}


RETRY = {"read_timeout_s": 0.4, "max_attempts": 2, "quarantine_after": 3, "backoff_base_s": 0.01,
         "backoff_max_s": 0.2, "probe_interval_s": 0.2}  # fmt: skip


N_FULL = 400


def _run_at_64(
    server: SimProcess, tmp_path: Path, **fields: Any
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """400 prompts at concurrency 64 on the full server: the run's stderr, its records (done, failed) and ticks."""
    data = write_prompts(tmp_path / "in.jsonl", N_FULL)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [server.url], data, out, concurrency=64, monitor=FAST_MONITOR, retry=RETRY, **fields
    )
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    ticks = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    return res.stderr, done, failed, ticks


@pytest.mark.parametrize("fleet", [(1, SIM)], indirect=True)
def test_a_full_server_whose_queue_outgrows_the_read_timeout_is_cut_to_what_it_runs_never_set_aside(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    """A queue of 60 kept on purpose (control.queue_min): its tail waits ~1 s against a read timeout of 0.4 s."""
    stderr, done, failed, ticks = _run_at_64(fleet[0], tmp_path, control={"queue_min": 60, "queue_max": 60})
    assert "setting server" not in stderr and "not usable" not in stderr, stderr
    assert "waited longer than the read timeout in its queue; in-flight cap 64 -> 4 (what it runs)" in stderr
    assert not failed  # timeouts in the queue spent no attempt (max_attempts 2)
    assert sorted(r["id"] for r in done) == [f"p{i:05d}" for i in range(N_FULL)]
    assert all(row["usable"] for t in ticks for row in t["servers"])
    last = ticks[-1]
    assert last["client"]["abandoned"] > 0 and last["client"]["abandoned_tokens"] > 0
    assert last["servers"][0]["timeouts"] == last["client"]["abandoned"]
    assert last["servers"][0]["limit"] <= CAP  # cut at once to what it runs
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| abandoned on read timeouts | " in summary and "tokens wasted" in summary
    assert "waited in a queue" in summary


@pytest.mark.parametrize("fleet", [(1, SIM)], indirect=True)
def test_a_fixed_concurrency_far_above_the_cap_keeps_what_the_server_holds_and_abandons_nothing(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    stderr, done, failed, ticks = _run_at_64(fleet[0], tmp_path)
    assert "concurrency 64 asks for 64 requests at once from servers that run 4" in stderr  # said at start
    assert not failed and len(done) == N_FULL
    assert ticks[-1]["client"]["abandoned"] == 0  # nothing waited out the read timeout in its queue
    assert max(row["limit"] for t in ticks for row in t["servers"]) == 2 * CAP  # its cap plus a queue of 4
    assert "| abandoned on read timeouts | - |" in (tmp_path / "out" / "summary.md").read_text()


TWIN = ["--model", "qwen3.6-27b", "--gpu", "rtx-pro-6000", "--flags", "--mamba-scheduler-strategy extra_buffer",
        "--time-scale", "0.02", "--output-len-mean", "270"]  # fmt: skip
TIME_SCALE = 0.02
GPU_READ_TIMEOUT_S = 180.0  # a tenth of the 1,800 s, for answers a tenth of the seed's ~2,700 tokens


def decoded(url: str) -> float:
    """The server's own decode counter: SGLang's ``realtime_tokens_total{mode="decode"}``."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    found = re.findall(r'^sglang:realtime_tokens_total\{[^}]*mode="decode"[^}]*\} (\S+)$', text, re.M)
    assert found, "the twin exports no realtime_tokens_total{mode=decode}"
    return sum(float(x) for x in found)


@pytest.mark.parametrize("fleet", [(1, TWIN)], indirect=True)
def test_concurrency_256_on_a_twin_wastes_at_most_2_percent_of_what_the_server_decodes(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    n = 400
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    url = fleet[0].url
    job = write_job(
        tmp_path / "job.yaml", [url], data, out, concurrency=256, sampling={"max_tokens": 1080},
        retry={"read_timeout_s": GPU_READ_TIMEOUT_S * TIME_SCALE},
        monitor={"scrape_interval_s": 0.5, "event_interval_s": 0.5, "rate_window_s": 2.0},
    )  # fmt: skip
    res = run_cli("run", str(job), "--no-live", timeout=600)
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    server_decoded = decoded(url)
    delivered = sum(r["completion_tokens"] for r in done)
    waste = max(0.0, server_decoded - delivered) / server_decoded
    print(f"decoded {server_decoded:,.0f}, delivered {delivered:,}, wasted {waste * 100:.1f} %")
    assert not failed and len(done) == n
    assert waste <= 0.02, res.stderr[-3000:]
    assert "setting server" not in res.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "server down" not in summary and "server flapping" not in summary
    ticks = [r for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    assert all(row["usable"] for t in ticks for row in t["servers"])
    assert max(row["limit"] for t in ticks[2:] for row in t["servers"]) < 64  # what it runs plus a queue, not 256


# 8 running at the cap, 60-token answers at ~65 ms a step: ~4 s each, against a read timeout of 3 s.
SLOW = ["--time-scale", "1", "--max-running-requests", "8", "--output-len-mean", "60", "--output-len-sigma", "0",
        "--step-base-ms", "65", "--step-per-req-ms", "0"]  # fmt: skip


@pytest.mark.parametrize("concurrency", [8, "auto"])
@pytest.mark.parametrize("fleet", [(1, SLOW)], indirect=True)
def test_answers_longer_than_the_read_timeout_grow_it_instead_of_livelocking(
    fleet: list[SimProcess], tmp_path: Path, concurrency: int | str
) -> None:
    n = 24
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", [fleet[0].url], data, out, concurrency=concurrency, sampling={"max_tokens": 60},
        monitor=FAST_MONITOR, retry={"read_timeout_s": 3.0, "max_attempts": 2},
    )  # fmt: skip
    res = run_cli("run", str(job), "--no-live", timeout=300)
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed and sorted(r["id"] for r in done) == [f"p{i:05d}" for i in range(n)]
    assert "while the server ran it (nothing queued): read timeout 3 s -> 6 s" in res.stderr
    assert "setting server" not in res.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "ran longer than the timeout" in summary and "read timeout grown to" in summary
    assert "answers outlive the read timeout" in summary  # the doctor's verdict: the timeout grew
    assert "queue wait exceeds the read timeout" not in summary
