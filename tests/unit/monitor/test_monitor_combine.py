"""A split run's event logs read as one job: ticks merged (counters summed, a server once), one start and one end,
and status running while any partition runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tokenmill.monitor.combine import combined_events, event_logs, merge_ticks
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.report.status import read_status


def tick(
    t: float, completed: int, *, total: int | None, eta: float | None, server_done: int, decode: float
) -> dict[str, Any]:
    return {
        "kind": "tick",
        "t": t,
        "run": "r",
        "elapsed_s": t,
        "client": {
            "done": 100 + completed + 1,
            "total": total,
            "completed": completed,
            "failed": 1,
            "retries": 2,
            "inflight": 8,
            "comp_s": 4.0,
            "client_tok_s": 400.0,
            "client_tokens": 10 * completed,
            "eta_s": eta,
            "errors": {"ServerFault": 2},
            "finish_reasons": {"stop": completed},
            "output_len": {
                "bounds": [10, 100],
                "counts": [1, completed, 0],
                "sum": 50.0 * completed,
                "count": completed,
            },
        },
        "servers": [
            {
                "url": "http://a",
                "inflight": 8,
                "limit": 16,
                "completed": server_done,
                "errors": 1,
                "client_tok_s": 400.0,
                "usable": True,
                "problem": None,
                "decode_tok_s": decode,
                "running": 12.0,
            },
        ],
        "verdicts": [],
        "binding": None,
    }


def test_ticks_of_several_clients_add_up_and_a_server_they_share_appears_once() -> None:
    merged = merge_ticks(
        [
            tick(10, 30, total=100, eta=5, server_done=30, decode=900),
            tick(12, 50, total=120, eta=9, server_done=50, decode=950),
        ]
    )
    snap = Snapshot.from_event(merged)
    assert (snap.completed, snap.failed, snap.retries, snap.inflight) == (80, 2, 4, 16)
    assert (snap.total, snap.eta_s, snap.comp_s, snap.client_tokens) == (220, 9, 8.0, 800)
    assert snap.done == 100 + 80 + 2  # what was recorded before counts once, not once per client
    [server] = snap.servers
    assert (server.completed, server.inflight, server.limit) == (80, 16, 32)  # the clients' own numbers, summed
    assert server.decode_tok_s == 950 and snap.decode_tok_s == 950  # the server's own, from the newest look
    client = merged["client"]
    assert client["errors"] == {"ServerFault": 4} and client["finish_reasons"] == {"stop": 80}
    assert client["output_len"]["counts"] == [2, 80, 0] and client["output_len"]["count"] == 80


def write_log(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def test_partition_logs_read_as_one_job_and_status_runs_while_any_runs(tmp_path: Path) -> None:
    start = {"kind": "start", "format": 2, "model": "m", "api": "openai-chat", "output": "out"}
    write_log(tmp_path / "events.p000.jsonl", [
        {**start, "t": 0.0, "run": "a"}, tick(10, 30, total=50, eta=5, server_done=30, decode=900) | {"run": "a"},
        {"kind": "end", "t": 15.0, "run": "a", "finished": True},
    ])  # fmt: skip
    write_log(tmp_path / "events.p001.jsonl", [
        {**start, "t": 2.0, "run": "b"}, tick(12, 20, total=50, eta=30, server_done=20, decode=950) | {"run": "b"},
    ])  # fmt: skip
    assert [p.name for p in event_logs(tmp_path)] == ["events.p000.jsonl", "events.p001.jsonl"]
    records = list(combined_events(event_logs(tmp_path)))
    assert [r["kind"] for r in records] == ["start", "tick", "tick"]  # partition 1 has not ended: no end yet
    assert records[2]["client"]["completed"] == 50
    st = read_status(tmp_path, now=20.0, recorded=(50, 0))
    assert st.state == "running" and st.summary.completed_this_run == 50 and st.summary.completed_total == 50
    assert st.summary.eta_s == 30  # the slowest partition's
    with (tmp_path / "events.p001.jsonl").open("ab") as fh:
        fh.write(orjson.dumps({"kind": "end", "t": 25.0, "run": "b", "finished": True}) + b"\n")
    assert list(combined_events(event_logs(tmp_path)))[-1] == {"kind": "end", "t": 25.0, "run": "a", "finished": True}
    assert read_status(tmp_path, now=30.0, recorded=(50, 0)).state == "finished"
