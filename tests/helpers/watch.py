"""A watched run for tests: a job, a dispatcher over scripted servers, a watched fleet and a run's status files."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, retry
from tokenmill.config import JobSpec
from tokenmill.doctor.predict import Expected
from tokenmill.errors import TransientError
from tokenmill.monitor.client import ClientMetrics
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.snapshot import RecordedVerdict, ServerRow, Snapshot
from tokenmill.records import RequestOutcome
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.metrics import RunInfo
from tokenmill.run.watchstate import WatchState, frozen_map
from tokenmill.run.work import DispatchStats


def job(tmp_path: Path, **monitor: object) -> JobSpec:
    return JobSpec.model_validate(
        {
            "input": {"path": str(tmp_path / "in.jsonl")},
            "servers": ["http://127.0.0.1:9"],
            "output": {"dir": str(tmp_path / "out")},
            "concurrency": 4,
            "monitor": {"enabled": False, **monitor},
        }
    )


def dispatcher(jobspec: JobSpec, fail_every: int = 0) -> Dispatcher:
    calls = {"n": 0}

    def script(server: str, prompt: object, backend: object) -> object:
        calls["n"] += 1
        if fail_every and calls["n"] % fail_every == 0:
            return TransientError("boom")
        return None

    return factories.dispatcher(jobspec.servers, ScriptedBackend(script), Sink(), retry(), 4)


VERDICT = {
    "rule": "state-pool-bound",
    "title": "state-pool bound",
    "binds": "state pool",
    "severity": "warning",
    "summary": "running 131/131 with 60 queued",
    "where": "http://s",
    "line": "state-pool bound (http://s): running 131/131 with 60 queued",
}


TICK = {  # the last tick of a run in progress
    "elapsed_s": 10.0,
    "client": {"done": 8, "total": 20, "completed": 7, "failed": 1, "client_tokens": 700, "eta_s": 15.0},
    "servers": [
        {
            "url": "http://s", "usable": True, "healthy": True, "decoded_tokens": 1000, "client_tokens": 700,
            "gpus": 2, "completed": 7,
        }
    ],
    "binding": "state pool",
    "verdicts": [VERDICT],
}  # fmt: skip


V1_TICK = {  # the same tick as the version before the format number wrote it
    "elapsed": 10.0,
    "client": {"done": 8, "total": 20, "completed": 7, "failed": 1, "completion_tokens": 700, "eta_s": 15.0},
    "servers": [{"url": "http://s", "usable": True, "healthy": True, "output_tokens": 1000, "gpus": 2, "completed": 7}],
    "binding": "state pool",
    "verdicts": ["state-pool-bound"],
}


def write_out(out: Path, end: bool, tick_age: float, v1: bool = False) -> None:
    out.mkdir()
    (out / "job.json").write_bytes(orjson.dumps({"spec": {"model": "m", "api": "openai-chat"}}))
    (out / "completions_000000.jsonl.open").write_bytes(b'{"id":"a","status":"ok"}\n' * 7)
    (out / "failed.jsonl").write_bytes(b'{"id":"b","status":"failed"}\n')
    now = time.time()
    log = EventLog(out / EVENTS_FILE, "r", wall=lambda: now - tick_age)
    start: dict[str, object] = {} if v1 else {"format": EVENT_FORMAT}
    log.write("start", **start, model="m", api="openai-chat", output=str(out), done_before=0)
    log.write("tick", **(V1_TICK if v1 else TICK))
    if end:
        log.write("end", finished=True, elapsed_s=10.0)
    log.close()


URL = "http://10.0.0.1:30000"


def watched() -> Any:
    """A watched run that knows every number the table has a row for."""
    client = ClientMetrics([URL])
    for reason in ("stop", "length"):
        client.observe(RequestOutcome(server=URL, ok=True, latency_s=1.5, completion_tokens=100, prompt_tokens=10,
                                      finish_reason=reason))  # fmt: skip
    client.observe(RequestOutcome(server=URL, ok=False, latency_s=0.1, error="TransientError"))
    view = ServerView(URL, None, None, True, None, running=10.0, queued=2.0, kv_usage=0.5, state_usage=0.7,
                      max_running=64, decode_tok_s=900.0, preemptions_per_min=1.0, scrapes=3)  # fmt: skip
    row = ServerRow(URL, 3, 8, 5, 0, 100.0, True, None)
    snap = Snapshot(elapsed_s=10.0, done=5, total=100, completed=5, failed=1, skipped=0, retries=1, inflight=3,
                    comp_s=0.5, client_tok_s=100.0, eta_s=190.0, servers=[row], waiting=False, last_failure=None,
                    upload_pending=2, upload_pending_bytes=1000, upload_oldest_s=30.0, upload_error="boom")  # fmt: skip
    verdict = RecordedVerdict("state-pool-bound", "state-pool bound", "state pool", "warning", "", URL, "")
    server = SimpleNamespace(url=URL, completed=5, completion_tokens=500, prompt_tokens=50, errors=1, timeouts=1,
                             inflight=3, limit=8, usable=True)  # fmt: skip
    stats = DispatchStats(failed=1, retries=1, abandoned=1, abandoned_tokens=50.0, held="backlog")
    state = WatchState(views=(view,), verdicts=(verdict,), cpu=0.3, loop_lag_s=0.01, max_tokens=2048,
                       expected=frozen_map({URL: Expected("h200", 1200.0, 3000.0, 0.7)}))  # fmt: skip
    run = SimpleNamespace(
        dispatcher=SimpleNamespace(stats=stats, servers=[server], inflight=3), client=client, last=snap,
        info=RunInfo("run-1", "m", 3, Path("out"), 10, 10**9), watch=state,
    )  # fmt: skip
    run.state = lambda: run.watch
    return run
