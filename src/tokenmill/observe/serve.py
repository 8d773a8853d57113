"""``tokenmill serve OUT | PREFIX``: the live page (:mod:`tokenmill.monitor.page`) for a run read from its files.

The state is read from the event logs (every partition's, as one job: :func:`~tokenmill.monitor.combine.
combined_events`) whenever they have grown, so the page of a run still going on moves too; a remote prefix's
copies are fetched again every ``refresh_s``. The sample viewer reads the whole corpus once, in the background
(:func:`~tokenmill.run.viewer.sample_view` over :func:`~tokenmill.storage.corpus.open_corpus`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.monitor.combine import combined_events, event_logs
from tokenmill.monitor.events import read_events, run_format
from tokenmill.monitor.page import Timeline, page_html, page_state
from tokenmill.monitor.snapshot import Snapshot, upgrade_tick
from tokenmill.report.status import read_status
from tokenmill.run.viewer import sample_view

log = logging.getLogger(__name__)


def _state_of(records: list[dict[str, Any]]) -> str:
    ends = [r for r in records if r.get("kind") in ("start", "end")]
    if not ends or ends[-1]["kind"] == "start":
        return "running"
    return "finished" if ends[-1].get("finished") else "stopped"


def _partition(path: Path) -> dict[str, Any]:
    """One writer's line of the partitions table: its last tick and whether its run ended."""
    records = [r for r in read_events(path) if r.get("kind") in ("start", "tick", "end")]
    fmt, last = 1, None
    for r in records:
        if r["kind"] == "start":
            fmt = run_format(r)
        elif r["kind"] == "tick":
            last = Snapshot.from_event(r, fmt)
    name = path.name.removeprefix("events.").removesuffix(".jsonl") if path.name != "events.jsonl" else "default"
    done = None if last is None else last.completed + last.failed  # its own, this run (done counts others' too)
    return {"name": name, "state": _state_of(records), "done": done,
            "total": None if last is None else last.total, "eta_s": None if last is None else last.eta_s,
            "comp_s": None if last is None else last.comp_s}  # fmt: skip


def read_state(
    root: Path, title: str, samples: dict[str, Any] | None, recorded: tuple[int, int] | None = None
) -> dict[str, Any]:
    """The page state of the run(s) whose event logs are in ``root``: the job's counts and state as ``tokenmill
    status`` gives them (``recorded``: (completed, failed) when they come from a prefix), the rest from the logs."""
    logs = event_logs(root)
    if not logs:
        raise OutputError(
            f"{root} holds no event log (events.jsonl): give the output directory of a run, or its remote prefix"
        )
    timeline, last, fmt, errors = Timeline(), None, 1, {}
    records = list(combined_events(logs))
    for rec in records:
        if rec.get("kind") == "start":
            fmt = run_format(rec)
        elif rec.get("kind") == "tick":
            tick = upgrade_tick(rec, fmt)
            last = Snapshot.from_event(tick)
            timeline.add(float(rec.get("t") or 0.0), last)
            errors = dict((tick.get("client") or {}).get("errors") or {})
    partitions = [_partition(p) for p in logs] if len(logs) > 1 else []
    try:
        status = read_status(root, recorded=recorded)
    except OutputError:  # no tick yet: what the logs say
        status = None
    out = page_state(last, timeline, title=title, state=_state_of(records) if status is None else status.state,
                     samples=samples, partitions=partitions, errors=errors)  # fmt: skip
    if out["progress"] is not None and status is not None:  # the job's counts: every writer's records, each once
        job = status.summary
        out["progress"].update(done=job.completed_total + job.failed_total, total=job.total_rows)
    return out


class PageSource:
    """What the server hands out: the page state, re-read when the logs have grown (or, for a prefix, every
    ``refresh_s`` through ``refetch``), and the samples once the background pass is done."""

    def __init__(
        self, root: Path, title: str, corpus: str | None,
        refetch: Callable[[], tuple[int, int]] | None = None, recorded: tuple[int, int] | None = None,
        refresh_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.root, self.title, self.refetch, self.refresh_s, self.clock = root, title, refetch, refresh_s, clock
        self.recorded = recorded
        self.samples: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] | None = None
        self._body = b""
        self._fetched = clock()
        self.body()  # a bad OUT fails here, before anything is served
        if corpus is not None:
            threading.Thread(target=self._sample, args=(corpus,), name="tokenmill-serve-samples", daemon=True).start()

    def _sample(self, corpus: str) -> None:
        from tokenmill.storage.corpus import open_corpus

        try:
            self.samples = sample_view(open_corpus(corpus).iter_live())
        except Exception as exc:  # the page goes on without samples, and the log says why
            log.warning("the sample viewer could not read %s: %s", corpus, exc)

    def body(self) -> bytes:
        with self._lock:
            if self.refetch is not None and self.clock() - self._fetched >= self.refresh_s:
                self._fetched = self.clock()
                self.recorded = self.refetch()
            key = (tuple((p.name, p.stat().st_size) for p in event_logs(self.root)), self.samples is not None,
                   self.recorded)  # fmt: skip
            if key != self._key:
                self._body = orjson.dumps(read_state(self.root, self.title, self.samples, self.recorded))
                self._key = key
            return self._body


def make_server(source: PageSource, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server of the page (``/``) and its state (``/state.json``); port 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the name http.server calls
            path = self.path.split("?", 1)[0]
            if path == "/":
                self._send(page_html().encode(), "text/html; charset=utf-8")
            elif path == "/state.json":
                try:
                    self._send(source.body(), "application/json")
                except OutputError as exc:
                    self.send_error(503, str(exc))
            else:
                self.send_error(404, "the page is at / and its state at /state.json")

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
            log.debug(format, *args)

    return ThreadingHTTPServer((host, port), Handler)
