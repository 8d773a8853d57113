"""``tokenmill status OUT``: where a run stands, read from its output directory without disturbing it.

Counts come from the output itself (manifest, open shard, failed.jsonl); rates, servers and the doctor's
verdicts from the last ``tick`` of the event log, decoded to the snapshot the run showed and summed up by the
builder that ends a run (:meth:`~tokenmill.run.summary.Summary.from_snapshot`). Nothing is locked or written,
so it works from another terminal while the run goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.fmt import duration
from tokenmill.monitor.events import EVENTS_FILE, last_events, run_format
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.output import layout, manifest
from tokenmill.run.summary import Summary

# no event for this long while no end record is written: the run was interrupted (events come every 10 s)
STALE_AFTER_S = 120.0


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def recorded_counts(out: Path) -> tuple[int, int]:
    """(completed, failed) recorded in ``out`` now: sealed shards per the manifest, the open shard, failures."""
    sealed = sum(e.count for e in manifest.read(out / layout.MANIFEST).entries.values())
    listing = layout.list_dir(out)
    open_lines = sum(_lines(out / name) for name in listing.open.values())
    return sealed + open_lines, _lines(out / layout.FAILED)


@dataclass(slots=True)
class Status:
    summary: Summary
    state: str  # running / finished / stopped / interrupted
    age_s: float  # seconds since the last event


def _job(out: Path) -> dict[str, Any]:
    try:
        data = orjson.loads((out / "job.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def read_status(out: Path, now: float | None = None) -> Status:
    """The current :class:`Status` of the run(s) in ``out``."""
    if not (out / "job.json").exists() and not (out / EVENTS_FILE).exists():
        raise OutputError(f"{out} is not a tokenmill output directory (no job.json): check the path")
    now = time.time() if now is None else now
    last = last_events(out / EVENTS_FILE)
    start, tick, end = last.get("start"), last.get("tick"), last.get("end")
    if start is None or tick is None:
        raise OutputError(
            f"{out} has no event log yet ({EVENTS_FILE}); it is written by `tokenmill run` from this version on"
        )
    age = now - float(tick.get("t") or 0.0)
    if end is not None and end.get("run") == start.get("run"):
        state = "finished" if end.get("finished") else "stopped"
        age = now - float(end.get("t") or 0.0)
    elif age > STALE_AFTER_S:
        state = "interrupted"
    else:
        state = "running"
    spec = _job(out).get("spec", {})
    # a tick of an earlier run than the last start (a rerun's first seconds): read it as format 1, which also
    # reads any later format unchanged
    fmt = run_format(start) if tick.get("run") == start.get("run") else 1
    summary = Summary.from_snapshot(
        Snapshot.from_event(tick, fmt),
        output_dir=str(start.get("output") or spec.get("output", {}).get("dir", "")),
        model=str(start.get("model") or spec.get("model", "?")),
        api=str(start.get("api") or spec.get("api", "?")),
        recorded=recorded_counts(out),
        state=state,
    )
    return Status(summary=summary, state=state, age_s=age)


def status_text(st: Status) -> str:
    when = {
        "running": f"running (last update {duration(st.age_s)} ago)",
        "finished": f"finished {duration(st.age_s)} ago",
        "stopped": f"stopped {duration(st.age_s)} ago (rerun the same command to resume)",
        "interrupted": f"interrupted: no update for {duration(st.age_s)} and no end record "
        "(rerun the same command to resume)",
    }[st.state]
    return f"{when}\n\n{st.summary.markdown()}"
