"""The event log, ``OUT/events.jsonl``: one JSON line per interval with client and per-server numbers.

Record kinds (every record has ``kind``, ``t`` = wall-clock seconds and ``run`` = the run's id):

- ``start``: a run began (the log's ``format``, job model, api, servers, per-server concurrency, prompts known so
  far);
- ``tick``: one snapshot, encoded by :meth:`tokenmill.monitor.snapshot.Snapshot.to_event` (``client`` numbers,
  ``servers`` rows, the doctor's current verdicts in short), plus the client metrics the run's watch adds;
- ``verdicts``: the doctor's shown verdicts changed (full verdicts, possibly none);
- ``end``: the run ended (finished or stopped) after ``elapsed_s``;
- ``reopen``: the run adds to a job its prefix marked finished, asked to (``reason``: ``--reopen``,
  ``retry-failed``, ``--repair-remote``); the prefix's ``_SUCCESS`` is withdrawn until the job is done again.

The ``format`` of a ``start`` record (:data:`EVENT_FORMAT`) says how that run's ticks are encoded; a start record
without one is format 1, whose ticks :func:`tokenmill.monitor.snapshot.upgrade_tick` reads.

Resumed runs append to the same file, so the report shows every run of an output directory on one time
line. The log is auxiliary: a torn last line (a crash mid-write) is skipped by the reader, and the output
directory's shards stay the only record of what is done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tokenmill.output import layout

EVENTS_FILE = layout.EVENTS
EVENT_FORMAT = 2  # 2: one name per quantity (client_tok_s, decode_tok_s, kv_usage, ...); 1: no format field


def events_file(partition: int | None = None) -> str:
    """The event log's name: ``events.jsonl``, or ``events.pPPP.jsonl`` for one partition of a split run."""
    return layout.Names(partition).events


def run_format(start: dict[str, Any] | None) -> int:
    """The format of the run a ``start`` record opens: 1 for a log written before the format number."""
    fmt = (start or {}).get("format")
    return fmt if isinstance(fmt, int) and not isinstance(fmt, bool) else 1


_TAIL_BYTES = 1 << 20

log = logging.getLogger(__name__)


class EventLog:
    """Appends records to ``path``; write errors are logged once and never stop the run."""

    def __init__(self, path: Path, run_id: str, wall: Callable[[], float] = time.time) -> None:
        self.path = path
        self.run_id = run_id
        self.wall = wall
        self._fh: Any = None
        self._broken = False

    def write(self, kind: str, **fields: Any) -> None:
        if self._broken:
            return
        record = {"kind": kind, "t": round(self.wall(), 3), "run": self.run_id, **fields}
        try:
            if self._fh is None:
                self._fh = self.path.open("ab", buffering=0)  # one write() per record: appends stay whole
            self._fh.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            self._fh.flush()
        except (OSError, TypeError) as exc:
            self._broken = True
            log.warning("cannot write the event log %s (%s); the run goes on without it", self.path, exc)

    def close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every whole, decodable record of ``path`` (a torn or bad line is skipped)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "kind" in rec:
                yield rec


def last_events(path: Path, kinds: tuple[str, ...] = ("start", "tick", "end")) -> dict[str, dict[str, Any]]:
    """The last record of each kind in ``kinds``, reading only the file's tail (cheap on a multi-day log)."""
    found: dict[str, dict[str, Any]] = {}
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - _TAIL_BYTES)
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return found
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line of the tail may be cut
    for line in reversed(lines[:-1]):  # the part after the last newline is not a whole record
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind in kinds and kind not in found:
            found[kind] = rec
            if len(found) == len(kinds):
                break
    if "start" in kinds and "start" not in found and start > 0:
        for rec in read_events(path):  # a long run: its start record is far back
            if rec["kind"] == "start":
                found["start"] = rec
    return found
