"""The event log read back as time series: client and per-server numbers, verdict intervals, final counts.

Long logs are thinned to at most ``max_points`` ticks (every n-th), so a multi-day run plots quickly;
cumulative numbers (histograms, failures) are always taken from the last tick, never from the thinned ones.
Resumed runs share one time axis (wall-clock time since the first record); a gap between runs breaks the
lines instead of joining them. Each run's ticks are read in the format its ``start`` record names, so a log
that an earlier version began reads as well (:func:`~tokenmill.monitor.snapshot.upgrade_tick`); the series
carry the snapshot's names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.monitor.combine import combined_events, event_logs
from tokenmill.monitor.events import EVENTS_FILE, run_format
from tokenmill.monitor.snapshot import Snapshot, upgrade_tick
from tokenmill.output import layout

NAN = float("nan")
# attributes of ServerRow and Snapshot
SERVER_KEYS = ("decode_tok_s", "running", "max_running", "queued", "kv_usage", "state_usage")
CLIENT_KEYS = ("client_tok_s", "decode_tok_s", "comp_s", "failed", "retries", "done", "inflight")
# summary.json keys before the event log's format 2 (the summary named its client-side numbers output_*)
V1_SUMMARY = {"output_tokens": "client_tokens", "output_tok_s": "client_tok_s", "server_decode_tok_s": "decode_tok_s"}


@dataclass(slots=True)
class VerdictSpan:
    """One verdict shown from ``start`` to ``end`` (seconds since the first record; None: still shown)."""

    start: float
    end: float | None
    verdict: dict[str, Any]


@dataclass(slots=True)
class RunData:
    out: Path
    t0: float = 0.0  # wall time of the first record
    times: list[float] = field(default_factory=list)  # seconds since t0, one per kept tick (NaN = a gap)
    client: dict[str, list[float]] = field(default_factory=dict)
    servers: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    spans: list[VerdictSpan] = field(default_factory=list)
    autotune: list[dict[str, Any]] = field(default_factory=list)  # --autotune's steps, "at": seconds since t0
    runs: list[dict[str, Any]] = field(default_factory=list)  # start records
    last_tick: dict[str, Any] | None = None  # with today's keys, whatever format the log was written in
    ended: dict[str, Any] | None = None  # the last end record, if the last run ended
    upload: dict[str, Any] | None = None  # where the last run's upload ended (its upload record), if it uploads
    summary: dict[str, Any] | None = None  # summary.json
    ticks_total: int = 0

    @property
    def last_snapshot(self) -> Snapshot | None:
        """The snapshot of the last tick."""
        return None if self.last_tick is None else Snapshot.from_event(self.last_tick)

    @property
    def failures_by_type(self) -> dict[str, int]:
        return dict((self.last_tick or {}).get("client", {}).get("errors") or {})


def _value(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else NAN


MAX_POINTS = 2000  # ticks plotted at most, by default


def load(out: Path, max_points: int = MAX_POINTS) -> RunData:
    """Read ``OUT/events.jsonl`` (and ``OUT/summary.json`` when present); a split run's partitions' logs
    (``events.pNNN.jsonl``) are read as one job's (:func:`~tokenmill.monitor.combine.combined_events`)."""
    path = out / EVENTS_FILE
    logs = event_logs(out)
    if not logs:
        raise OutputError(
            f"{path} does not exist: run `tokenmill run` with this output directory first "
            "(the event log is written while a run goes on)"
        )
    data = RunData(out=out)
    ticks: list[dict[str, Any]] = []
    verdict_records: list[tuple[float, list[dict[str, Any]]]] = []
    fmt = 1
    for rec in combined_events(logs):
        t = float(rec.get("t") or 0.0)
        if not data.t0:
            data.t0 = t
        kind = rec["kind"]
        if kind == "start":
            fmt = run_format(rec)
            data.runs.append(rec)
            data.ended = None
            data.upload = None
            if ticks:
                ticks.append({"gap": True, "t": t})
            if verdict_records and verdict_records[-1][1]:
                verdict_records.append((t, []))  # a new run starts with no verdict shown
        elif kind == "tick":
            rec = upgrade_tick(rec, fmt)
            ticks.append(rec)
            data.last_tick = rec
        elif kind == "verdicts":
            verdict_records.append((t, list(rec.get("verdicts") or [])))
        elif kind == "autotune":
            data.autotune.append({**rec, "at": t - data.t0})
        elif kind == "upload":
            data.upload = rec
        elif kind == "end":
            data.ended = rec
            if verdict_records and verdict_records[-1][1]:
                verdict_records.append((t, []))
    data.ticks_total = sum(1 for r in ticks if not r.get("gap"))
    _series(data, ticks, max_points)
    data.spans = _spans(verdict_records, data.t0)
    summary = out / layout.SUMMARY_JSON
    if summary.exists():
        try:
            data.summary = _summary(orjson.loads(summary.read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            data.summary = None
    return data


def _summary(obj: Any) -> dict[str, Any] | None:
    """``summary.json`` with today's keys (an earlier version's are renamed)."""
    if not isinstance(obj, dict):
        return None
    summary: dict[str, Any] = {V1_SUMMARY.get(str(k), str(k)): v for k, v in obj.items()}
    summary["servers"] = [
        {V1_SUMMARY.get(str(k), str(k)): v for k, v in s.items()} if isinstance(s, dict) else s
        for s in summary.get("servers") or []
    ]
    return summary


def _series(data: RunData, ticks: list[dict[str, Any]], max_points: int) -> None:
    real = [r for r in ticks if not r.get("gap")]
    step = max(1, math.ceil(len(real) / max_points))
    kept: list[dict[str, Any]] = []
    seen = 0
    for r in ticks:
        if r.get("gap"):
            kept.append(r)
            continue
        if seen % step == 0 or r is real[-1]:
            kept.append(r)
        seen += 1
    urls: list[str] = []
    for r in real:
        for s in r.get("servers") or []:
            if s.get("url") not in urls:
                urls.append(s["url"])
    data.client = {k: [] for k in CLIENT_KEYS}
    data.servers = {u: {k: [] for k in SERVER_KEYS} for u in urls}
    for r in kept:
        if r.get("gap"):
            data.times.append(NAN)
            for k in CLIENT_KEYS:
                data.client[k].append(NAN)
            for u in urls:
                for k in SERVER_KEYS:
                    data.servers[u][k].append(NAN)
            continue
        data.times.append(float(r["t"]) - data.t0)
        snap = Snapshot.from_event(r)  # already upgraded
        for k in CLIENT_KEYS:
            data.client[k].append(_value(getattr(snap, k)))
        rows = {row.url: row for row in snap.servers}
        for u in urls:
            row = rows.get(u)
            for k in SERVER_KEYS:
                data.servers[u][k].append(NAN if row is None else _value(getattr(row, k)))


def _spans(records: list[tuple[float, list[dict[str, Any]]]], t0: float) -> list[VerdictSpan]:
    spans: list[VerdictSpan] = []
    open_: dict[str, VerdictSpan] = {}
    for t, verdicts in records:
        now = {v.get("rule", "?"): v for v in verdicts}
        for rule, span in list(open_.items()):
            if rule not in now:
                span.end = t - t0
                del open_[rule]
        for rule, v in now.items():
            if rule in open_:
                open_[rule].verdict = v  # the latest numbers of an ongoing verdict
            else:
                open_[rule] = VerdictSpan(t - t0, None, v)
                spans.append(open_[rule])
    return spans
