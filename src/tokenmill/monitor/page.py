"""The live page of a run: ``page.html`` (one file, no asset from outside the package) and the state it polls.

The page fetches ``state.json`` every few seconds and draws it: progress and ETA, the fleet table with each
server's pools, throughput and ETA over time as inline SVG plots, the doctor's verdicts, uploads, failures and the
sample viewer. The run's metrics port serves it live (:mod:`tokenmill.run.prometheus`), ``tokenmill serve`` for a
finished run or a whole job at its prefix; both build the state here, from snapshots (no I/O).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from tokenmill.monitor.lines import counts_text, expected_text, time_scale_text, truncation, upload_text, waste_text
from tokenmill.monitor.snapshot import Diagnosis, Snapshot, binding_text

TIMELINE_POINTS = 600  # points kept per series; past it every other point is dropped (older ones thinner)


def page_html() -> str:
    """The page itself."""
    return resources.files("tokenmill.monitor").joinpath("page.html").read_text(encoding="utf-8")


@dataclass(slots=True)
class Timeline:
    """Throughput, progress and ETA over time, bounded: at most ``points`` points per series."""

    points: int = TIMELINE_POINTS
    t: list[float] = field(default_factory=list)  # wall-clock seconds
    series: dict[str, list[float | None]] = field(default_factory=dict)

    KEYS = ("client_tok_s", "decode_tok_s", "comp_s", "eta_s", "done")

    def add(self, wall: float, snap: Snapshot) -> None:
        if self.t and wall <= self.t[-1]:
            return
        self.t.append(wall)
        for key in self.KEYS:
            value = getattr(snap, key)
            self.series.setdefault(key, []).append(None if value is None else float(value))
        if len(self.t) > self.points:
            self.t = self.t[::2]
            self.series = {k: v[::2] for k, v in self.series.items()}

    def as_dict(self) -> dict[str, Any]:
        return {"t": self.t, **{k: self.series.get(k, []) for k in self.KEYS}}


def _server(row: Any) -> dict[str, Any]:
    return {
        "url": row.url,
        "usable": row.usable,
        "healthy": row.healthy,
        "problem": row.problem,
        "running": row.running,
        "max_running": row.max_running,
        "queued": row.queued,
        "kv_usage": row.kv_usage,
        "state_usage": row.state_usage,
        "decode_tok_s": row.decode_tok_s,
        "client_tok_s": row.client_tok_s,
        "inflight": row.inflight,
        "limit": row.limit,
        "completed": row.completed,
        "errors": row.errors,
        "expected_share": row.expected_share,
        "gpu": row.gpu,
    }


def _verdict(v: Diagnosis) -> dict[str, str]:
    return {"rule": v.rule, "title": v.title, "binds": v.binds, "severity": v.severity, "where": v.where(),
            "line": v.line()}  # fmt: skip


def page_state(
    snap: Snapshot | None,
    timeline: Timeline,
    *,
    title: str,
    state: str,
    verdicts: Sequence[Diagnosis] | None = None,
    samples: dict[str, Any] | None = None,
    partitions: Iterable[dict[str, Any]] = (),
    errors: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What the page shows now: ``snap`` the latest snapshot (None before the first), ``verdicts`` those shown
    (default: the snapshot's), ``samples`` the sample viewer's (recent answers, worst by signal)."""
    shown: list[Diagnosis] = list(snap.verdicts if verdicts is None and snap is not None else verdicts or [])
    out: dict[str, Any] = {"title": title, "state": state, "history": timeline.as_dict(),
                           "samples": samples or {"recent": [], "worst": {}}, "partitions": list(partitions),
                           "verdicts": [_verdict(v) for v in shown]}  # fmt: skip
    if snap is None:
        return {**out, "progress": None, "servers": [], "uploads": None, "failures": None}
    out["progress"] = {
        "done": snap.done, "total": snap.total, "eta_s": snap.eta_s, "elapsed_s": snap.elapsed_s,
        "comp_s": snap.comp_s, "client_tok_s": snap.client_tok_s, "decode_tok_s": snap.decode_tok_s,
        "inflight": snap.inflight, "limit": snap.limit, "expected": expected_text(snap),
        "truncated": truncation(snap), "binding": binding_text(shown) or snap.binding, "waiting": snap.waiting,
        "time_scale": time_scale_text(snap),
    }  # fmt: skip
    out["servers"] = [_server(r) for r in snap.servers]
    out["uploads"] = None if snap.upload_pending is None else {
        "pending": snap.upload_pending, "bytes": snap.upload_pending_bytes, "oldest_s": snap.upload_oldest_s,
        "error": snap.upload_error, "held": snap.held, "line": upload_text(snap),
    }  # fmt: skip
    out["failures"] = {
        "failed": snap.failed, "retries": snap.retries, "skipped": snap.skipped, "abandoned": snap.abandoned,
        "waste": waste_text(snap), "last": snap.last_failure, "errors": dict(errors or {}),
        "counts": counts_text(snap),
    }  # fmt: skip
    return out
