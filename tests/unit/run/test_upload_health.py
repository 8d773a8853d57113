"""Upload health: the backlog that pauses generation (output.upload.max_backlog), the dispatcher's hold, the
doctor's uploads-behind verdict, and the backlog as the status line and the summary show it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, prompts, retry
from tests.helpers.doctor import observe, verdicts
from tokenmill.config import UploadSpec
from tokenmill.config.output import parse_bytes
from tokenmill.doctor import ClientObs, Observation
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog
from tokenmill.monitor.lines import status_line
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.records import Prompt
from tokenmill.report import load
from tokenmill.report.html import summary_rows
from tokenmill.run.backlog import Backlog
from tokenmill.run.summary import Summary
from tokenmill.storage.upload import UploadStatus

REMOTE = "s3://bucket/job/"


def test_max_backlog_reads_shards_or_bytes_and_refuses_other_words() -> None:
    assert UploadSpec(max_backlog=40).backlog_limit() == (40, None)
    assert UploadSpec(max_backlog="20GB").backlog_limit() == (None, 20 * 10**9)
    assert parse_bytes("512 MiB") == 512 << 20
    assert UploadSpec().backlog_limit() == (None, None)
    with pytest.raises(ValueError, match="not a size"):
        UploadSpec(max_backlog="lots")
    with pytest.raises(ValueError, match="at least 1 shard"):
        UploadSpec(max_backlog=0)


def test_the_backlog_pauses_past_the_limit_and_resumes_at_half_of_it() -> None:
    state = {"pending": 0, "bytes": 0}

    def status() -> UploadStatus:
        return UploadStatus(
            remote=REMOTE, pending=state["pending"], pending_bytes=state["bytes"], failing=True, last_error="refused"
        )

    shards = Backlog(status, UploadSpec(max_backlog=4))
    seen = []
    for pending in (3, 4, 5, 4, 3, 2, 3):
        state["pending"] = pending
        seen.append(shards.why() is not None)
    assert seen == [False, False, True, True, True, False, False]  # held from 5 until down to 2
    state["pending"] = 9
    why = shards.why()
    assert why is not None and "past output.upload.max_backlog (4 shards)" in why and "refused" in why
    by_size = Backlog(status, UploadSpec(max_backlog="1MB"))
    state["bytes"] = 2_000_000
    assert by_size.why() is not None
    state["bytes"] = 400_000
    assert by_size.why() is None
    assert Backlog(status, UploadSpec()).why() is None  # no max_backlog: never held


async def test_a_held_dispatcher_takes_no_new_prompt_until_released() -> None:
    holder: dict[str, Any] = {}

    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if p.id == "2":
            holder["d"].hold("4 shard(s) wait for upload")
        return None

    backend = ScriptedBackend(script)
    sink = Sink()
    d = factories.dispatcher(["http://a"], backend, sink, retry(), 1)
    holder["d"] = d
    task = asyncio.create_task(d.run(prompts(6)))
    for _ in range(200):  # let the loop run as far as it can (yields only, no time passes)
        await asyncio.sleep(0)
    # the request in flight finished, and the prompt already waiting for its slot went; no new one was taken
    assert [p for _, p in backend.calls] == ["0", "1", "2", "3"]
    assert d.stats.held == "4 shard(s) wait for upload" and len(sink.done) == 4
    d.hold(None)
    assert await task
    assert sorted(c.id for c in sink.done) == [str(i) for i in range(6)] and d.stats.held is None


def test_the_doctor_says_uploads_are_behind_when_the_oldest_waits_too_long_or_generation_is_paused() -> None:
    base = observe("kv_bound")
    behind = ClientObs(upload_pending=7, upload_pending_bytes=70_000_000, upload_oldest_s=900.0, upload_error="503")
    found = verdicts(Observation(base.servers, behind))
    v = found["uploads-behind"]
    assert v.binds == "" and v.severity == "critical"
    assert dict(v.evidence)["shards waiting"] == "7 (70 MB)" and dict(v.evidence)["oldest waiting"] == "15m00s"
    assert "output.upload.max_backlog" in v.advice
    young = ClientObs(upload_pending=7, upload_oldest_s=30.0)
    assert "uploads-behind" not in verdicts(Observation(base.servers, young))
    paused = ClientObs(upload_pending=7, upload_oldest_s=30.0, upload_held="backlog")
    assert "uploads-behind" in verdicts(Observation(base.servers, paused))


def test_the_status_line_and_the_summary_show_the_backlog_and_the_pause() -> None:
    snap = Snapshot(
        elapsed_s=60.0, done=10, total=100, completed=10, failed=0, skipped=0, retries=0, inflight=2, comp_s=1.0,
        client_tok_s=10.0, eta_s=90.0, servers=[], waiting=False, last_failure=None, upload_pending=3,
        upload_pending_bytes=12_000_000, upload_oldest_s=250.0, upload_error="connection refused",
        held="3 shard(s) wait for upload",
    )  # fmt: skip
    line = status_line(snap)
    assert "upload: 3 shard(s) waiting (12.0 MB), oldest 4m10s; store error: connection refused" in line
    assert "PAUSED: 3 shard(s) wait for upload" in line
    back = Snapshot.from_event(snap.to_event())  # what `tokenmill status` reads back from the event log
    md = Summary.from_snapshot(back, output_dir="o", model="m", api="a", recorded=(10, 0), state="running").markdown()
    assert "| upload backlog | upload: 3 shard(s) waiting (12.0 MB), oldest 4m10s" in md
    assert "| generation paused | 3 shard(s) wait for upload |" in md


def _log(out: Path, *, end: dict[str, Any] | None) -> None:
    snap = Snapshot(
        elapsed_s=60.0, done=10, total=100, completed=10, failed=0, skipped=0, retries=0, inflight=2, comp_s=1.0,
        client_tok_s=10.0, eta_s=90.0, servers=[], waiting=False, last_failure=None, upload_pending=3,
        upload_oldest_s=250.0, upload_error="connection refused", abandoned=4, abandoned_tokens=900.0,
    )  # fmt: skip
    events = EventLog(out / EVENTS_FILE, "r1")
    events.write("start", format=EVENT_FORMAT, model="m", api="openai-chat", servers=[], total=100)
    events.write("tick", **snap.to_event())
    if end is not None:
        events.write("end", elapsed_s=60.0, finished=True)
        events.write("upload", **end)
    events.close()


def test_the_report_shows_the_backlog_while_it_runs_and_where_the_upload_ended(tmp_path: Path) -> None:
    _log(tmp_path, end=None)
    rows = dict(summary_rows(load(tmp_path)))
    assert rows["upload"].startswith("upload: 3 shard(s) waiting, oldest 4m10s; store error: connection refused")
    assert rows["abandoned on read timeouts (last run)"] == "abandoned 4 on timeouts (~900 tokens wasted)"
    (tmp_path / EVENTS_FILE).unlink()
    _log(tmp_path, end={"pending": 0, "pending_bytes": 0, "oldest_pending_s": None, "error": None, "complete": True})
    assert dict(summary_rows(load(tmp_path)))["upload"] == "every sealed shard uploaded"
