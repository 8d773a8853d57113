"""The snapshot as the event log encodes it: one encoding, read back to the same numbers, verdicts and summary;
ticks of the previous format read with today's names."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import orjson
import pytest

from tokenmill.doctor import Verdict
from tokenmill.doctor.model import PlanPoint, Prediction
from tokenmill.monitor.client import ClientMetrics
from tokenmill.monitor.events import EVENT_FORMAT
from tokenmill.monitor.snapshot import RecordedVerdict, ServerRow, Snapshot, upgrade_tick
from tokenmill.run.summary import Summary
from tokenmill.run.watch import tick_record

A, B = "http://10.0.0.1:30000", "http://10.0.0.2:30000"
VERDICT = Verdict(
    "state-pool-bound", "state pool", "state-pool bound", "warning", (A,), 2,
    "running 131/131 with 60 queued; state pool 99%, KV only 31%", (("running / max running", "131/131"),),
    "The recurrent-state pool limits how many requests run at once.",
    ("--disable-radix-cache --max-running-requests 380",),
    (Prediction("--disable-radix-cache --max-running-requests 380", PlanPoint(131, 1200.0), PlanPoint(380, 2900.0),
                "planner"),),
)  # fmt: skip


def snapshot() -> Snapshot:
    """A run 123 s in, with numbers that are not round (what a real tick holds)."""
    rows = [
        ServerRow(
            A, 64, 64, 1234, 3, client_tok_s=1789.123456, usable=True, problem=None, client_tokens=187_654,
            healthy=True, running=127.333333, max_running=131, queued=58.666667, kv_usage=0.3123456,
            state_usage=0.9912345, decode_tok_s=1850.987654, prompt_tok_s=612.345678, gpus=2,
            decoded_tokens=201_234.567, limit_reason="the server's cap plus a queue",
        ),
        ServerRow(
            B, 0, 64, 321, 17, client_tok_s=0.0, usable=False, problem="5 failures in a row, last: HTTP 500",
            client_tokens=45_678,
        ),
    ]  # fmt: skip
    return Snapshot(
        elapsed_s=123.456789, done=1_555 + 400, total=10_000, completed=1_555, failed=12, skipped=3, retries=41,
        inflight=64, comp_s=12.3456789, client_tok_s=1789.123456, eta_s=652.123, servers=rows, waiting=False,
        last_failure=f"{B}: HTTP 500", decode_tok_s=1850.987654, history=(1.0, 2.0), verdicts=(VERDICT,),
        cpu=0.4567891, loop_lag_s=0.0123456, prompt_tokens=98_765, client_tokens=233_332, limit=128,
        binding="state pool",
    )  # fmt: skip


def through_the_log(snap: Snapshot) -> dict[str, Any]:
    """The tick as it is written and read back: JSON bytes, extras and all."""
    parsed: dict[str, Any] = orjson.loads(orjson.dumps(tick_record(snap, ClientMetrics([A, B]), {A: 63.5})))
    return parsed


def test_a_tick_reads_back_to_the_snapshot_it_encodes() -> None:
    snap = snapshot()
    tick = through_the_log(snap)
    again = Snapshot.from_event(tick)
    skip = {"history", "verdicts", "servers"}
    for f in fields(Snapshot):
        if f.name not in skip:
            want = getattr(snap, f.name)
            rounded = pytest.approx(want, abs=0.05) if isinstance(want, float) else want  # rates: 0.1 tok/s
            assert getattr(again, f.name) == rounded, f.name
    assert again.history == ()  # the sparkline is the dashboard's alone
    assert again.elapsed_s == snap.elapsed_s and again.eta_s == snap.eta_s  # what the summary divides by: exact
    for row, back in zip(snap.servers, again.servers, strict=True):
        assert asdict(back) == pytest.approx(asdict(row), abs=0.05)
        assert back.decoded_tokens == row.decoded_tokens and back.client_tokens == row.client_tokens
    (v,) = again.verdicts
    assert isinstance(v, RecordedVerdict)
    assert (v.rule, v.title, v.binds, v.severity, v.summary) == (
        VERDICT.rule, VERDICT.title, VERDICT.binds, VERDICT.severity, VERDICT.summary
    )  # fmt: skip
    assert v.where() == A and v.line() == VERDICT.line() and "-> --disable-radix-cache" in v.line()
    assert tick["servers"][0]["inflight_avg"] == 63.5 and tick["servers"][1]["inflight_avg"] is None
    assert set(tick["client"]) >= {"finish_reasons", "errors", "output_len"}  # the watch's extras ride along


def test_rates_and_gauges_are_rounded_as_displayed() -> None:
    tick = snapshot().to_event()
    row = tick["servers"][0]
    assert (row["decode_tok_s"], row["client_tok_s"], row["kv_usage"], row["running"]) == (1851.0, 1789.1, 0.312, 127.3)
    assert (tick["client"]["comp_s"], tick["client"]["cpu"]) == (12.346, 0.457)


def test_the_summary_of_a_run_and_of_its_last_tick_are_one_table() -> None:
    """What ``tokenmill status`` shows of a finished run is what the run printed at its end."""
    snap = snapshot()

    def summary(of: Snapshot, state: str) -> Summary:
        return Summary.from_snapshot(
            of, output_dir="/out", model="m", api="openai-chat", recorded=(9_000, 40), state=state
        )

    ends = {state: summary(snap, state) for state in ("finished", "stopped")}
    for state, at_end in ends.items():
        from_log = summary(Snapshot.from_event(through_the_log(snap)), state)
        assert from_log.markdown() == at_end.markdown(), state
        assert asdict(from_log) == asdict(at_end), state
    s = ends["finished"]
    assert [x.client_tokens for x in s.servers] == [187_654, 45_678]
    assert s.servers[0].decode_tok_s == pytest.approx(201_234.567 / 123.456789) and s.servers[1].decode_tok_s is None
    assert s.verdicts == [VERDICT.line()] and s.binding == "state pool"
    assert s.eta_s is None and ends["stopped"].eta_s == 652.123


def test_a_tick_of_the_previous_format_reads_with_todays_names() -> None:
    old = {
        "elapsed": 10.0,
        "client": {"done": 8, "completed": 7, "comp_s": 0.7, "tok_s": 70.0, "server_tok_s": 100.0,
                   "completion_tokens": 700, "errors": {"TransientError": 1}},
        "servers": [{"url": A, "healthy": True, "tok_s": 100.0, "client_tok_s": 70.0, "kv": 0.25, "state": 0.5,
                     "output_tokens": 1000, "completed": 7, "inflight_avg": 3.0}],
        "verdicts": ["kv-bound"],
    }  # fmt: skip
    snap = Snapshot.from_event(old, fmt=1)
    assert (snap.elapsed_s, snap.client_tok_s, snap.decode_tok_s, snap.client_tokens) == (10.0, 70.0, 100.0, 700)
    (row,) = snap.servers
    assert (row.decode_tok_s, row.client_tok_s, row.kv_usage, row.state_usage) == (100.0, 70.0, 0.25, 0.5)
    assert row.decoded_tokens == 1000
    assert [(v.rule, v.line()) for v in snap.verdicts] == [("kv-bound", "kv-bound")]
    # read as today's format, the old keys mean nothing: the format number is what tells them apart
    assert Snapshot.from_event(old).decode_tok_s is None


def test_upgrading_a_tick_of_this_format_changes_nothing() -> None:
    """A reader unsure of a tick's format (a rerun's first seconds) may upgrade it as format 1."""
    tick = through_the_log(snapshot())
    assert upgrade_tick(tick, 1) == tick
    assert upgrade_tick(tick, EVENT_FORMAT) is tick
