"""``tokenmill status OUT``: where a run stands, read from its output directory without disturbing it.

Counts come from the output itself (manifests, open shards, failures; every writer's); rates, servers and the
doctor's verdicts from the last ``tick`` of the event log, decoded to the snapshot the run showed and summed up
by the builder that ends a run (:meth:`~tokenmill.run.summary.Summary.from_snapshot`). A split run's partitions
(their logs ``events.pNNN.jsonl``) are shown as one job: their last ticks merged
(:func:`~tokenmill.monitor.combine.merge_ticks`), running while any of them runs. Nothing is locked or written,
so it works from another terminal while the run goes on (and on a copy of a remote prefix's records).

Whether a run without an end record still runs is known at once on its own host: its writer lock names its pid,
host and start (:mod:`tokenmill.output.holder`), and a process that is gone makes it "interrupted: the process is
gone". A run on another host (or one whose lock names no holder) is judged by its heartbeat, the event log's last
record: none for ``STALE_AFTER_S`` means interrupted.
"""

from __future__ import annotations

import re
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
from tokenmill.output.holder import Holder, read_holder
from tokenmill.output.identity import JobRecord, read_record_quietly
from tokenmill.run.summary import Summary

# no event for this long while no end record is written: the run was interrupted (events come every 10 s)
STALE_AFTER_S = 120.0
_PARTITION_LOG = re.compile(r"events\.p(\d{3,})\.jsonl")
_PARTITION_LOCK = re.compile(r"\.lock\.p(\d{3,})")


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
    state: str  # starting / running / finished / stopped / interrupted
    age_s: float  # seconds since the last event
    why: str = ""  # why it is interrupted (the process is gone; no update for a while)


def read_status(out: Path, now: float | None = None, recorded: tuple[int, int] | None = None) -> Status:
    """The current :class:`Status` of the run(s) in ``out``; ``recorded`` (completed, failed) when the counts come
    from elsewhere (a remote prefix)."""
    logs = {_log_writer(p): p for p in event_logs(out)}
    locks = _writer_locks(out)
    if not (out / layout.JOB).exists() and not logs and not locks:
        raise OutputError(f"{out} is not a tokenmill output directory (no {layout.JOB}): check the path")
    now = time.time() if now is None else now
    states: list[tuple[str, float, str]] = []
    writers = []
    for writer in sorted(set(logs) | set(locks), key=lambda w: -1 if w is None else w):
        holder = locks.get(writer)
        starting = _starting(holder, now)
        if starting is not None:
            states.append(starting)
            continue
        events = last_events(logs[writer], ("start", "tick", "end", "upload")) if writer in logs else {}
        if "start" in events and "tick" in events:
            writers.append((events["start"], _uploaded(events), events.get("end"), holder))
    if not writers and not states:
        raise OutputError(
            f"{out} has no event log yet ({EVENTS_FILE}); it is written by `tokenmill run` from this version on"
        )
    ticks = []
    for start, tick, end, holder in writers:
        states.append(_state(start, tick, end, now, holder))
        # a tick of an earlier run than the last start (a rerun's first seconds): read it as format 1, which also
        # reads any later format unchanged
        ticks.append(upgrade_tick(tick, run_format(start) if tick.get("run") == start.get("run") else 1))
    state, age, why = _job_state(states)
    first: dict[str, Any] = writers[0][0] if writers else {}
    record = read_record_quietly(out) or JobRecord.from_json({})
    job = record.job()  # the typed spec; None for a record this version cannot read (then its keys as written)
    summary = Summary.from_snapshot(
        Snapshot.from_event(merge_ticks(ticks) if ticks else {}),
        output_dir=str(first.get("output") or (job.output.dir if job else record.section("output").get("dir")) or out),
        model=str(first.get("model") or (job.model if job else record.setting("model")) or "?"),
        api=str(first.get("api") or (job.api if job else record.setting("api")) or "?"),
        recorded=recorded if recorded is not None else recorded_counts(out),
        state=state,
    )
    return Status(summary=summary, state=state, age_s=age, why=why)


def _log_writer(path: Path) -> int | None:
    """The partition whose event log ``path`` is (None: the default writer)."""
    found = _PARTITION_LOG.fullmatch(path.name)
    return int(found.group(1)) if found else None


def _writer_locks(out: Path) -> dict[int | None, Holder]:
    """The holders the writer locks of ``out`` name (a shared lock, or one of an older version, names none)."""
    found: dict[int | None, Holder] = {}
    for path in [out / layout.LOCK, *sorted(out.glob(f"{layout.LOCK}.p*"))]:
        lock = _PARTITION_LOCK.fullmatch(path.name)
        holder = read_holder(path) if lock is not None or path.name == layout.LOCK else None
        if holder is not None:
            found[int(lock.group(1)) if lock is not None else None] = holder
    return found


def _starting(holder: Holder | None, now: float) -> tuple[str, float, str] | None:
    """A writer whose lock says its run is starting: starting (and what it waits for: the store), or interrupted
    when its process is gone (or, on another host, has said nothing for ``STALE_AFTER_S``); None otherwise."""
    if holder is None or holder.phase != "starting":
        return None
    age = now - holder.since
    alive = holder.alive()
    if alive is False:
        return "interrupted", age, f"the process is gone ({holder.shown()} no longer runs) while it was starting"
    if alive is None and age > STALE_AFTER_S:
        return "interrupted", age, f"no update for {duration(age)} while it was starting"
    wait = holder.waiting
    if not wait:
        return "starting", age, ""
    at = wait.get("at")
    since = now - float(at) if isinstance(at, int | float) else 0.0
    return (
        "starting",
        age,
        f"waiting for the {wait.get('on')} at {wait.get('where')}, which does not answer ({wait.get('error')}; "
        f"{wait.get('tries')} tries so far, the last failed {duration(since)} ago)",
    )


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


def _state(
    start: dict[str, Any], tick: dict[str, Any], end: dict[str, Any] | None, now: float, holder: Holder | None
) -> tuple[str, float, str]:
    """One client's state, the seconds since its last word, and why it is interrupted."""
    if end is not None and end.get("run") == start.get("run"):
        return ("finished" if end.get("finished") else "stopped"), now - float(end.get("t") or 0.0), ""
    age = now - float(tick.get("t") or 0.0)
    alive = holder.alive() if holder is not None else None
    if alive is False and holder is not None:
        return "interrupted", age, f"the process is gone ({holder.shown()} no longer runs)"
    if alive is True or age <= STALE_AFTER_S:
        return "running", age, ""
    return "interrupted", age, f"no update for {duration(age)}"


def _job_state(states: list[tuple[str, float, str]]) -> tuple[str, float, str]:
    """The job's state: running while any client runs, finished once all have, else stopped or interrupted."""
    for state in ("running", "starting", "interrupted", "stopped", "finished"):
        found = sorted((age, why) for s, age, why in states if s == state)
        if found:
            return state, found[0][0], found[0][1]
    raise AssertionError("no state")


def status_text(st: Status) -> str:
    when = {
        "running": f"running (last update {duration(st.age_s)} ago)",
        "starting": f"starting ({duration(st.age_s)} ago){': ' + st.why if st.why else ''}",
        "finished": f"finished {duration(st.age_s)} ago",
        "stopped": f"stopped {duration(st.age_s)} ago (rerun the same command to resume)",
        "interrupted": f"interrupted: {st.why or f'no update for {duration(st.age_s)}'}; last update "
        f"{duration(st.age_s)} ago and no end record (rerun the same command to resume)",
    }[st.state]
    return f"{when}\n\n{st.summary.markdown()}"
