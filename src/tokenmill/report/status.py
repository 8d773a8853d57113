"""``tokenmill status OUT``: where a run stands, read from its output directory without disturbing it.

Counts come from the output itself (manifests, open shards, failures; every writer's); rates, servers and the
doctor's verdicts from the last ``tick`` of the event log, decoded to the snapshot the run showed and summed up
by the builder that ends a run (:meth:`~tokenmill.run.summary.Summary.from_snapshot`). A split run's partitions
(their logs ``events.pNNN.jsonl``) are shown as one job: their last ticks merged
(:func:`~tokenmill.monitor.combine.merge_ticks`), running while any of them runs. Nothing is locked or written,
so it works from another terminal while the run goes on (and on a copy of a remote prefix's records).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.errors import OutputError
from tokenmill.fmt import duration
from tokenmill.monitor.combine import event_logs, merge_ticks
from tokenmill.monitor.events import EVENTS_FILE, last_events, run_format
from tokenmill.monitor.snapshot import Snapshot, upgrade_tick
from tokenmill.output import layout, manifest
from tokenmill.output.identity import JobRecord, read_record_quietly
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
    """(completed, failed) recorded in ``out`` now, by every writer: sealed shards per the manifests, the open
    shards, failures."""
    completed = failed = 0
    for part in [None, *sorted(layout.list_dir(out).partitions)]:
        names = layout.Names(part)
        completed += sum(e.count for e in manifest.read(out / names.manifest).entries.values())
        completed += sum(_lines(out / name) for name in layout.list_dir(out, part).open.values())
        failed += _lines(out / names.failed)
    return completed, failed


@dataclass(slots=True)
class Status:
    summary: Summary
    state: str  # running / finished / stopped / interrupted
    age_s: float  # seconds since the last event


def read_status(out: Path, now: float | None = None, recorded: tuple[int, int] | None = None) -> Status:
    """The current :class:`Status` of the run(s) in ``out``; ``recorded`` (completed, failed) when the counts come
    from elsewhere (a remote prefix)."""
    logs = event_logs(out)
    if not (out / layout.JOB).exists() and not logs:
        raise OutputError(f"{out} is not a tokenmill output directory (no {layout.JOB}): check the path")
    now = time.time() if now is None else now
    found = [last_events(p, ("start", "tick", "end", "upload")) for p in logs]
    writers = [(w["start"], _uploaded(w), w.get("end")) for w in found if "start" in w and "tick" in w]
    if not writers:
        raise OutputError(
            f"{out} has no event log yet ({EVENTS_FILE}); it is written by `tokenmill run` from this version on"
        )
    states: list[tuple[str, float]] = []
    ticks = []
    for start, tick, end in writers:
        states.append(_state(start, tick, end, now))
        # a tick of an earlier run than the last start (a rerun's first seconds): read it as format 1, which also
        # reads any later format unchanged
        ticks.append(upgrade_tick(tick, run_format(start) if tick.get("run") == start.get("run") else 1))
    state, age = _job_state(states)
    start = writers[0][0]
    record = read_record_quietly(out) or JobRecord.from_json({})
    job = record.job()  # the typed spec; None for a record this version cannot read (then its keys as written)
    summary = Summary.from_snapshot(
        Snapshot.from_event(merge_ticks(ticks)),
        output_dir=str(start.get("output") or (job.output.dir if job else record.section("output").get("dir", ""))),
        model=str(start.get("model") or (job.model if job else record.setting("model")) or "?"),
        api=str(start.get("api") or (job.api if job else record.setting("api")) or "?"),
        recorded=recorded if recorded is not None else recorded_counts(out),
        state=state,
    )
    return Status(summary=summary, state=state, age_s=age)


def _uploaded(events: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The last tick, with the upload backlog the run's ``upload`` record says it ended with (written after the
    end of a run waited for its uploads, so a drained backlog is not shown as still waiting)."""
    tick, up = events["tick"], events.get("upload")
    if up is None or up.get("run") != tick.get("run") or float(up.get("t") or 0) < float(tick.get("t") or 0):
        return tick
    client = {
        **(tick.get("client") or {}),
        "upload_pending": up.get("pending"),
        "upload_pending_bytes": up.get("pending_bytes") or 0,
        "upload_oldest_s": up.get("oldest_pending_s"),
        "upload_error": up.get("error"),
        "held": None,
    }
    return {**tick, "client": client}


def _state(start: dict[str, Any], tick: dict[str, Any], end: dict[str, Any] | None, now: float) -> tuple[str, float]:
    """One client's state and the seconds since its last word."""
    if end is not None and end.get("run") == start.get("run"):
        return ("finished" if end.get("finished") else "stopped"), now - float(end.get("t") or 0.0)
    age = now - float(tick.get("t") or 0.0)
    return ("interrupted" if age > STALE_AFTER_S else "running"), age


def _job_state(states: list[tuple[str, float]]) -> tuple[str, float]:
    """The job's state: running while any client runs, finished once all have, else stopped or interrupted."""
    for state in ("running", "interrupted", "stopped", "finished"):
        ages = [age for s, age in states if s == state]
        if ages:
            return state, min(ages)
    raise AssertionError("no state")


def status_text(st: Status) -> str:
    when = {
        "running": f"running (last update {duration(st.age_s)} ago)",
        "finished": f"finished {duration(st.age_s)} ago",
        "stopped": f"stopped {duration(st.age_s)} ago (rerun the same command to resume)",
        "interrupted": f"interrupted: no update for {duration(st.age_s)} and no end record "
        "(rerun the same command to resume)",
    }[st.state]
    return f"{when}\n\n{st.summary.markdown()}"
