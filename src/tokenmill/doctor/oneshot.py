"""One look at a fleet for ``tokenmill doctor``: scrapes until the rates settle, plus the client's side when known.

Counters move in bursts (SGLang counts a prefill batch at once, its decode every 40 steps), so a rate over a few
seconds can be off by an order of magnitude. The one-shot doctor scrapes at least ``oneshot_samples`` times and
then until the fleet's decode and prompt rates over the whole sampling settle (:class:`Settling`), at most
``oneshot_max_s``; the result says how long it sampled and, when the rates had not settled, how far they moved.

The client's side comes from a run in progress (the last snapshot of its event log: in-flight requests and
limits per server, CPU, mean prompt and output lengths, the answers cut at max_tokens; and from its job record
the kind of requests it sends, their max_tokens and ignore_eos), or from ``--concurrency``; without either, rules
that need it say the client's limit is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenmill.config import DoctorSpec, MonitorSpec
from tokenmill.doctor.model import ClientObs, ClientSide, Observation, ServerObs
from tokenmill.histogram import Histogram
from tokenmill.monitor.client import TRUNCATED
from tokenmill.monitor.events import EVENTS_FILE, last_events
from tokenmill.monitor.fleet import FleetMonitor, ServerView


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
    whole = Histogram.from_dict(c["completed_len"]) if isinstance(c.get("completed_len"), dict) else None
    raw = c.get("finish_reasons")
    reasons: dict[str, Any] = raw if isinstance(raw, dict) else {}
    limit = c.get("max_tokens")
    client = ClientObs(
        cpu=c.get("cpu"),
        loop_lag_s=c.get("loop_lag_s"),
        avg_prompt_tokens=prompt / completed if prompt and completed else None,
        avg_output_tokens=hist.mean() if hist is not None else None,
        completions_s=c.get("comp_s"),
        max_tokens=limit if isinstance(limit, int) else None,
        answers=int(sum(float(v) for v in reasons.values() if isinstance(v, int | float))),
        truncated=int(reasons.get(TRUNCATED) or 0),
        completed_p50=whole.quantile(0.5) if whole is not None else None,
        completed_p90=whole.quantile(0.9) if whole is not None else None,
    )
    return sides, client


def with_run_requests(out: Path, client: ClientObs) -> ClientObs:
    """``client`` with the kind of requests the run in ``out`` sends, from its ``job.json``: ``ignore_eos``, and
    ``max_tokens`` where the tick did not say; ``client`` as it is without a readable record."""
    from tokenmill.output.identity import read_record_quietly
    from tokenmill.planner.run_files import sends_ignore_eos

    record = read_record_quietly(out)
    job = record.job() if record is not None else None
    if job is None:
        return client
    if client.max_tokens is None:
        client = replace(client, max_tokens=job.sampling.max_tokens)
    return replace(client, ignore_eos=sends_ignore_eos(job.sampling.extra_body))


@dataclass(slots=True)
class Settling:
    """The fleet's decode and prompt rates over the whole sampling, round by round: settled once each differs by
    less than ``tolerance`` (a share) from its value a third of the sampling time earlier."""

    tolerance: float
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (elapsed s, decode, prompt tok/s)

    def add(self, elapsed_s: float, views: Sequence[ServerView]) -> None:
        up = [v for v in views if v.healthy]
        decode = sum(v.decode_tok_s or 0.0 for v in up)
        prompt = sum(v.prompt_tok_s or 0.0 for v in up)
        self.history.append((elapsed_s, decode, prompt))

    def spread(self) -> dict[str, float] | None:
        """How far each rate moved over the last third of the sampling (a share of its latest value)."""
        if len(self.history) < 3:
            return None
        t, decode, prompt = self.history[-1]
        earlier = next((h for h in reversed(self.history[:-1]) if h[0] <= t * 2 / 3), self.history[0])
        return {"decode tok/s": _moved(earlier[1], decode), "prompt tok/s": _moved(earlier[2], prompt)}

    def settled(self) -> bool:
        spread = self.spread()
        return spread is not None and max(spread.values()) < self.tolerance

    def text(self) -> str:
        """One line for the report: how long it sampled, and how steady the rates were."""
        if not self.history:
            return "no scrapes"
        t = self.history[-1][0]
        head = f"rates over {t:.0f} s ({len(self.history)} scrapes per server)"
        spread = self.spread()
        if spread is None:
            return head
        if max(spread.values()) < self.tolerance:
            return f"{head}, settled within {self.tolerance:.0%}"
        moved = ", ".join(f"{k} by {v:.0%}" for k, v in spread.items() if v >= self.tolerance)
        return f"{head} had not settled: over the last third {moved}; read them as that uncertain"


def _moved(before: float, now: float) -> float:
    if now <= 0 and before <= 0:
        return 0.0
    return abs(now - before) / max(now, before)


async def sample_until_settled(fleet: FleetMonitor, spec: DoctorSpec) -> Settling:
    """Scrape ``fleet`` at least ``oneshot_samples`` times, then until its rates settle or ``oneshot_max_s``."""
    settling = Settling(spec.oneshot_settle)
    loop = asyncio.get_running_loop()
    async with fleet.session() as session:
        start = loop.time()
        rounds = 0
        while True:
            views = await fleet.poll_once(session)
            rounds += 1
            elapsed = loop.time() - start
            settling.add(elapsed, views)
            done = rounds >= spec.oneshot_samples and settling.settled()
            if done or elapsed + spec.oneshot_interval_s > spec.oneshot_max_s:
                return settling
            await asyncio.sleep(spec.oneshot_interval_s)


async def observe(
    urls: Sequence[str],
    spec: DoctorSpec,
    *,
    headers: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    out: Path | None = None,
) -> tuple[Observation, Settling]:
    """Scrape every server until the rates settle (see :class:`Settling`) and pair the views with the client's
    side; the rates are over the whole sampling."""
    fleet = FleetMonitor(
        urls,
        interval_s=spec.oneshot_interval_s,
        timeout_s=MonitorSpec().scrape_timeout_s,
        window_s=spec.oneshot_max_s + 2 * spec.oneshot_interval_s,
        flap_window_s=spec.flap_window_s,
        headers=headers,
    )
    settling = await sample_until_settled(fleet, spec)
    views = fleet.views
    sides: dict[str, ClientSide] = {}
    client = ClientObs()
    if out is not None:
        tick = last_events(out / EVENTS_FILE, kinds=("tick",)).get("tick")
        if tick is not None:
            sides, client = client_from_tick(tick)
        client = with_run_requests(out, client)
    default = ClientSide(limit=concurrency) if concurrency is not None else ClientSide()
    return Observation(tuple(ServerObs(v, sides.get(v.url, default)) for v in views), client), settling
