"""One look at a fleet for ``tokenmill doctor``: a few scrapes, plus the client's side when it is known.

The client's side comes from a run in progress (the last snapshot of its event log: in-flight requests and
limits per server, CPU, mean prompt and output lengths), or from ``--concurrency``; without either, rules
that need it say the client's limit is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenmill.config import DoctorSpec, MonitorSpec
from tokenmill.doctor.model import ClientObs, ClientSide, Observation, ServerObs
from tokenmill.monitor.client import Histogram
from tokenmill.monitor.events import EVENTS_FILE, last_events
from tokenmill.monitor.fleet import FleetMonitor


def client_from_tick(tick: Mapping[str, Any]) -> tuple[dict[str, ClientSide], ClientObs]:
    """The client's side of each server, and of the whole client, from an event-log ``tick``."""

    def inflight(row: Mapping[str, Any]) -> float | None:
        for key in ("inflight_avg", "inflight"):  # the window mean, else the count at that instant
            if isinstance(row.get(key), int | float):
                return float(row[key])
        return None

    sides = {
        str(r.get("url")): ClientSide(
            inflight=inflight(r),
            limit=int(r["limit"]) if isinstance(r.get("limit"), int) else None,
            usable=bool(r.get("usable", True)),
        )
        for r in tick.get("servers") or []
    }
    c = tick.get("client") or {}
    completed = c.get("completed") or 0
    prompt = c.get("prompt_tokens")
    hist = Histogram.from_dict(c["output_len"]) if isinstance(c.get("output_len"), dict) else None
    client = ClientObs(
        cpu=c.get("cpu"),
        loop_lag_s=c.get("loop_lag_s"),
        avg_prompt_tokens=prompt / completed if prompt and completed else None,
        avg_output_tokens=hist.mean() if hist is not None else None,
        completions_s=c.get("comp_s"),
    )
    return sides, client


async def observe(
    urls: Sequence[str],
    spec: DoctorSpec,
    *,
    headers: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    out: Path | None = None,
) -> Observation:
    """Scrape every server ``spec.oneshot_samples`` times and pair the views with the client's side."""
    span = spec.oneshot_samples * spec.oneshot_interval_s + 1.0
    fleet = FleetMonitor(
        urls,
        interval_s=spec.oneshot_interval_s,
        timeout_s=MonitorSpec().scrape_timeout_s,
        window_s=span,
        flap_window_s=spec.flap_window_s,
        headers=headers,
    )
    views = await fleet.sample(spec.oneshot_samples, spec.oneshot_interval_s)
    sides: dict[str, ClientSide] = {}
    client = ClientObs()
    if out is not None:
        tick = last_events(out / EVENTS_FILE, kinds=("tick",)).get("tick")
        if tick is not None:
            sides, client = client_from_tick(tick)
    default = ClientSide(limit=concurrency) if concurrency is not None else ClientSide()
    return Observation(tuple(ServerObs(v, sides.get(v.url, default)) for v in views), client)
