"""The client's side: its CPU or event loop, its in-flight limit, requests outliving the read timeout.

A request that outlives the read timeout on a busy server did so in one of two places: in its queue (the client
sends more than it runs: ``queue_timeout``) or while the server ran it with nothing queued (the answer takes
longer than the timeout allows: ``work_timeout``, which says whether tokenmill grew the timeout or, at its
ceiling, cut the running count)."""

from __future__ import annotations

import math

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.checks.signs import rate_text, running_text, waiting
from tokenmill.doctor.model import Candidate, ClientObs, ClientSide, Finding, Observation, ServerObs
from tokenmill.fmt import UNKNOWN, num, pct


def client_bound(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    busy_cpu = c.cpu is not None and c.cpu >= t.client_cpu
    lagging = c.loop_lag_s is not None and c.loop_lag_s >= t.loop_lag_s
    healthy = [s.view for s in obs.servers if s.view.healthy]
    fed = sum(1 for v in healthy if waiting(v, t))
    if not (busy_cpu or lagging) or not healthy or fed >= len(healthy) / 2:
        return None
    return Finding(
        summary=f"client CPU {pct(c.cpu)} of a core, event-loop lag {num((c.loop_lag_s or 0) * 1000)} ms, "
        f"{fed}/{len(healthy)} servers have a queue",
        evidence=(
            ("client CPU", f"{pct(c.cpu)} of one core"),
            ("event-loop lag", f"{num((c.loop_lag_s or 0) * 1000)} ms"),
            ("servers with a queue", f"{fed}/{len(healthy)}"),
            ("completions/s", num(c.completions_s)),
        ),
        advice="The client process is the limit, not the servers. Use the cheaper native API "
        "(`api: sglang-generate`), keep save_token_ids off unless needed, or split the input across several "
        "tokenmill processes (input.offset / input.limit), each with its own output directory.",
        candidates=(Candidate(change="--api sglang-generate", flags_after=()),),
    )


def _recent(side: ClientSide, t: DoctorSpec, kind: str) -> bool:
    """Whether the last busy timeout was of ``kind`` ("queue" or "work") and recent."""
    if not side.timeouts or side.timeout_age_s is None or side.timeout_age_s > t.timeout_recent_s:
        return False
    return (side.last_timeout or "queue") == kind


def queue_timeout(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    side, v = o.client, o.view
    if not _recent(side, t, "queue"):
        return None
    timeout = f"{side.read_timeout_s:,.0f} s" if side.read_timeout_s is not None else UNKNOWN
    return Finding(
        summary=f"{side.timeouts:,} requests outlived the read timeout ({timeout}) while the server ran "
        f"{running_text(v)} with {num(v.queued)} queued",
        evidence=(
            ("requests timed out while it was busy", f"{side.timeouts:,}, the last {side.timeout_age_s:,.0f} s ago"),
            ("read timeout (retry.read_timeout_s)", timeout),
            ("running / max running", running_text(v)),
            ("queued", num(v.queued)),
            ("client in flight / limit", f"{num(side.inflight)}/{side.limit if side.limit else UNKNOWN}"),
            ("output tokens thrown away (estimated)", num(side.abandoned_tokens)),
        ),
        advice="The server is full, not down: requests waited in its queue longer than the read timeout and were "
        "abandoned with the tokens decoded for them. tokenmill cut its in-flight cap to what it runs and retries "
        "without spending an attempt; lower `concurrency` (or use `concurrency: auto`) so the queue stays short, or "
        "raise `retry.read_timeout_s` if single answers take that long.",
        severity="warning",
    )


def work_timeout(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    side, v = o.client, o.view
    if not _recent(side, t, "work"):
        return None
    start, now, top = side.read_timeout_s, side.read_timeout_now_s, side.read_timeout_max_s
    grown = start is not None and now is not None and now > start
    at_top = now is not None and top is not None and now >= top
    if at_top and side.work_cuts:
        did = (
            f"its read timeout is at the ceiling ({_s(top)}, retry.read_timeout_max_s), so tokenmill cut the requests "
            f"it runs to {side.limit if side.limit else UNKNOWN} ({side.work_cuts} cut(s)): fewer at once, each "
            "answer sooner"
        )
    elif grown:
        did = (
            f"tokenmill raised its read timeout from {_s(start)} to {_s(now)} (ceiling {_s(top)}, "
            "retry.read_timeout_max_s)"
        )
    else:
        did = f"its read timeout ({_s(now)}) cannot grow (ceiling {_s(top)}, retry.read_timeout_max_s)"
    return Finding(
        summary=f"{side.work_timeouts:,} answers outlived the read timeout while the server ran them "
        f"({running_text(v)}, {num(v.queued)} queued): {did}",
        evidence=(
            ("timed out while running (nothing queued)", f"{side.work_timeouts:,} of {side.timeouts:,}"),
            ("read timeout: job / now / ceiling", f"{_s(start)} / {_s(now)} / {_s(top)}"),
            ("running / max running", running_text(v)),
            ("queued", num(v.queued)),
            ("client in flight / limit", f"{num(side.inflight)}/{side.limit if side.limit else UNKNOWN}"),
            ("output tokens thrown away (estimated)", num(side.abandoned_tokens)),
        ),
        advice="The client's read timeout is shorter than the work: an answer at this batch takes longer than "
        f"retry.read_timeout_s allows, with nothing waiting in the queue. {did[0].upper()}{did[1:]}. Set "
        "`retry.read_timeout_s` above the longest answer's time (max_tokens x the step time at this batch), or "
        "lower `sampling.max_tokens`; an answer that outlives the ceiling spends the prompt's attempts and is "
        "failed, never retried without end.",
        severity="warning",
    )


def _s(seconds: float | None) -> str:
    return UNKNOWN if seconds is None else f"{seconds:,.0f} s"


def client_underfeeding(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v, cl = o.view, o.client
    cap = v.max_running
    if not v.healthy or not cap or v.running is None or v.queued is None or v.running <= 0:
        return None
    if v.queued >= t.queue_waiting or v.running >= t.at_cap * cap:
        return None
    sent = cl.inflight if cl.inflight is not None else v.running + v.queued
    if cl.limit is not None and sent < min(t.client_at_limit * cl.limit, cl.limit - 1):
        return None  # the client is not holding back (the input may be running out)
    hold, held_by = advice.pool_hold(o, c, t.pool_full) or (cap, f"the running cap ({cap})")
    if v.running >= t.at_cap * hold:
        return None  # the pools are as full as they get: more in flight would only wait in the queue
    want = max(math.ceil(v.running) + 1, math.ceil(hold * t.feed_headroom))
    limit = "unknown" if cl.limit is None else f"{num(sent)}/{cl.limit} (at its limit)"
    return Finding(
        summary=f"queue {num(v.queued)}, running {running_text(v)}; client in flight {limit}; the pools hold {hold}",
        evidence=(
            ("server queue", num(v.queued)),
            ("running / max running", running_text(v)),
            ("client in flight / limit", limit),
            ("requests the pools hold", f"{hold}: {held_by}"),
            ("server decode tok/s", rate_text(v, v.decode_tok_s)),
        ),
        advice=f"The server could run {num(hold - v.running)} more requests but is not sent them: its queue is "
        + (
            f"empty while the client sits at its in-flight limit. Raise the per-server concurrency to about {want} "
            f"(`concurrency: {want}` in the job, or --concurrency {want}): what {held_by} holds, plus a small queue."
            if cl.limit is not None
            else "empty. Whether the client holds back is unknown (give `--output OUT` of the run, or "
            "`--concurrency N`): at a run's tail, or with the client below its limit, this is expected."
        ),
        candidates=(
            Candidate(
                change=f"--concurrency {want}",
                flags_after=tuple(advice.current_flags(o)),
                est_max_running=hold,
                running_before=round(v.running),
                kind="client",
            ),
        ),
        severity="warning" if cl.limit is not None else "info",
    )
