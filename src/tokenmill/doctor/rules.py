"""The doctor's rules, one row each: what binds, when it fires, the evidence it shows and what to change.

Read the table at the bottom first (:data:`RULES`); each check above it is a few lines over the observed
numbers. Server checks see one server (its window means and rates, its ``/server_info``, the client's
side of it and, when the planner knows the model and GPU, the planner's picture of it today: which side of
the roofline its decode step is on, how much of its time goes to prefill); client checks see the whole
observation. Thresholds come from :class:`~tokenmill.config.DoctorSpec`. Verdicts are ranked by their
predicted impact (:mod:`tokenmill.doctor.engine`); the table's order only breaks ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import Candidate, ClientObs, Finding, Observation, ServerObs
from tokenmill.fmt import UNKNOWN, duration, num, pct
from tokenmill.monitor.fleet import ServerView
from tokenmill.planner.admission import (
    CLIP_MAX_NEW_TOKENS,
    admission_need,
    concurrent_at_full_length,
    min_new_token_ratio,
    running_reserve,
)

HALF_DTYPES = ("bfloat16", "float16", "bf16", "fp16")

ServerCheck = Callable[[ServerObs, ClientObs, DoctorSpec], Finding | None]
ClientCheck = Callable[[Observation, DoctorSpec], Finding | None]


def _waiting(v: ServerView, t: DoctorSpec) -> bool:
    return v.queued is not None and v.queued >= t.queue_waiting


def _at_cap(v: ServerView, t: DoctorSpec) -> bool:
    """The server reached its running cap in the window. SGLang writes its gauges at batch boundaries, so a
    window mean of them lags; the peak shows a cap that binds."""
    running = v.running_peak if v.running_peak is not None else v.running
    return running is not None and bool(v.max_running) and running >= t.at_cap * (v.max_running or 0)


def _state_capped(o: ServerObs, t: DoctorSpec) -> bool:
    """At the cap, and the cap is the state pool's: slots // slots-per-request."""
    scap = advice.state_cap(o)
    v = o.view
    return scap is not None and v.max_running is not None and v.max_running <= scap + 1 and _at_cap(v, t)


def _state_sized_to_cap(v: ServerView) -> bool:
    """Radix cache off with an explicit cap (and no explicit slot count): SGLang sizes the state pool to
    exactly the cap, so a full state pool is by construction and the cap itself is what binds."""
    info = v.info
    return (
        info is not None
        and bool(info.disable_radix_cache)
        and info.max_running_flag is not None
        and info.max_mamba_cache_size is None
    )


def _state_full(v: ServerView, t: DoctorSpec) -> bool:
    return v.state_usage is not None and v.state_usage >= t.pool_full and not _state_sized_to_cap(v)


def hybrid(v: ServerView) -> bool:
    """A recurrent-state pool exists: /server_info says so, else the slot gauges (SGLang exports the state
    gauges at 0 for a pure transformer, so their presence proves nothing)."""
    if v.info is not None and v.info.hybrid is not None:
        return v.info.hybrid
    snap = v.snapshot
    if snap is not None and snap.hybrid is not None:
        return snap.hybrid
    return v.state_usage is not None and v.state_usage > 0


def _full_length_tokens(c: ClientObs) -> float | None:
    """Tokens SGLang reserves for one request at admission: its prompt plus its output limit (the job's
    max_tokens, of which SGLang counts at most ``CLIP_MAX_NEW_TOKENS``; else the longest the client has seen on
    average)."""
    out = min(c.max_tokens, CLIP_MAX_NEW_TOKENS) if c.max_tokens else c.avg_output_tokens
    if not out:
        return None
    return (c.avg_prompt_tokens or 0.0) + out


def _kv_reserve_full(o: ServerObs, c: ClientObs) -> tuple[int, int] | None:
    """SGLang admits a request only if its prompt and whole (clipped) output limit fit beside what the running
    requests hold and reserve (:mod:`tokenmill.planner.admission`): ``ignore_eos`` requests reserve their whole
    remaining output, ordinary ones the settled new-token ratio of it beside what they hold. When the running
    set plus one more request at full length overflows the KV pool, the KV pool binds even if its usage gauge
    shows room. Returns (requests that fit at full length, tokens each)."""
    per, kv = _full_length_tokens(c), advice.kv_tokens(o)
    running = o.view.running_peak if o.view.running_peak is not None else o.view.running
    if not per or not kv or running is None:
        return None
    prompt = round(c.avg_prompt_tokens or 0.0)
    limit = c.max_tokens or round(per - prompt)
    need = admission_need(prompt, limit)
    if c.ignore_eos:
        held = running * need
    else:
        info = o.view.info
        ratio = min_new_token_ratio((info.schedule_conservativeness if info else None) or 1.0)
        context = o.view.avg_context or float(prompt)
        written = max(0, round(context) - prompt)
        held = running * (context + running_reserve(limit, written, ignore_eos=False, new_token_ratio=ratio))
    if held + need <= kv:
        return None
    return concurrent_at_full_length(int(kv), prompt, limit, ignore_eos=c.ignore_eos), round(per)


def _tok_s(v: ServerView, rate: float | None) -> str:
    """A rate the server measured; a twin's (``/server_info`` says its time scale s) runs 1/s times the GPU's, so
    it is shown with its value on the GPU's clock, the one the planner's predictions beside it are on."""
    scale = v.info.time_scale if v.info is not None else None
    if rate is None or not scale or scale == 1.0:
        return num(rate)
    return f"{num(rate)} (a twin at time scale {scale:g}: {num(rate * scale)} on the GPU's clock)"


def _running(v: ServerView) -> str:
    return f"{num(v.running)}/{v.max_running if v.max_running else '?'}"


# ---- the checks ---------------------------------------------------------------------------------------------


def server_down(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not o.client.usable:
        reason = o.client.problem or "too many failures in a row"
    elif not v.healthy and v.scrapes and (v.down_for_s or 0.0) >= t.down_after_s:
        reason = v.error or "no answer"
    else:
        return None
    return Finding(
        summary=f"not usable: {reason}",
        evidence=(("state", "unreachable" if not v.healthy else "set aside by the client"), ("reason", reason)),
        advice="Check the server process and its log. A running tokenmill keeps probing it and sends work again "
        "as soon as it answers; nothing is marked failed meanwhile. If it is gone for good, drop it from servers.",
        severity="critical",
    )


def flapping(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if v.transitions < t.flap_transitions:
        return None
    info = v.info
    cand: tuple[Candidate, ...] = ()
    if info is not None and info.mem_fraction_static is not None and info.mem_fraction_static > 0.5:
        lower = advice.mem_fraction(o, step=-0.03, ceiling=1.0)
        cand = (lower,) if lower else ()
    return Finding(
        summary=f"{v.transitions} up/down changes within {t.flap_window_s / 60:.0f} min",
        evidence=(
            ("up/down changes", f"{v.transitions} in {t.flap_window_s / 60:.0f} min"),
            ("now", "up" if v.healthy else "down"),
            ("last error", v.error or "-"),
        ),
        advice="The server keeps dropping out and coming back: look in its log for restarts and out-of-memory "
        "errors. If memory runs out under load, lower --mem-fraction-static a little or cap "
        "--max-running-requests.",
        candidates=cand,
        severity="critical",
    )


def client_bound(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    busy_cpu = c.cpu is not None and c.cpu >= t.client_cpu
    lagging = c.loop_lag_s is not None and c.loop_lag_s >= t.loop_lag_s
    healthy = [s.view for s in obs.servers if s.view.healthy]
    fed = sum(1 for v in healthy if _waiting(v, t))
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


def truncation(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    share = c.truncated_share
    if share is None or c.answers < t.truncated_min_answers or share < t.truncated_share:
        return None
    limit = f"{c.max_tokens:,}" if c.max_tokens else UNKNOWN
    want = advice.suggested_max_tokens(c, t.truncated_target)
    lengths = f"median {num(c.completed_p50)}, p90 {num(c.completed_p90)}"
    change = f"--max-tokens {want}" if want is not None else None
    raise_to = f"to about {want:,} (`sampling.max_tokens: {want}` in the job, or {change})" if want else ""
    return Finding(
        summary=f"{share * 100:.1f}% of answers hit max_tokens {limit} ({c.truncated:,} of {c.answers:,}); "
        f"whole answers: {lengths} tokens",
        evidence=(
            ("answers cut at max_tokens", f"{c.truncated:,} of {c.answers:,} ({share * 100:.1f}%)"),
            ("sampling.max_tokens in force", limit),
            ("whole answers' output tokens", lengths),
            ("output tokens per answer (all)", num(c.avg_output_tokens)),
            (
                "suggested max_tokens",
                f"{want:,}: about {pct(t.truncated_target)} cut (log-normal fit of the lengths)" if want else "-",
            ),
        ),
        advice="Answers that hit max_tokens end mid-sentence: the corpus loses the end of the model's real output "
        f"and a drafter learns from answers that stop nowhere. Raise sampling.max_tokens {raise_to}; prompt + "
        "max_tokens must fit the servers' context length, and a larger limit reserves more KV per request at "
        "admission. `tokenmill regenerate JOB.yaml --where truncated --sampling max_tokens=N` answers the cut "
        "ones again.",
        candidates=(Candidate(change=change, flags_after=(), kind="client"),) if change else (),
        severity="critical" if share >= 0.25 else "warning",
    )


def queue_timeout(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    side, v = o.client, o.view
    if not side.timeouts or side.timeout_age_s is None or side.timeout_age_s > t.timeout_recent_s:
        return None
    timeout = f"{side.read_timeout_s:,.0f} s" if side.read_timeout_s is not None else UNKNOWN
    return Finding(
        summary=f"{side.timeouts:,} requests outlived the read timeout ({timeout}) while the server ran "
        f"{_running(v)} with {num(v.queued)} queued",
        evidence=(
            ("requests timed out while it was busy", f"{side.timeouts:,}, the last {side.timeout_age_s:,.0f} s ago"),
            ("read timeout (retry.read_timeout_s)", timeout),
            ("running / max running", _running(v)),
            ("queued", num(v.queued)),
            ("client in flight / limit", f"{num(side.inflight)}/{side.limit if side.limit else UNKNOWN}"),
            ("output tokens thrown away (estimated)", num(side.abandoned_tokens)),
        ),
        advice="The server is full, not down: requests waited in its queue longer than the read timeout and were "
        "abandoned with the tokens decoded for them. tokenmill lowers its in-flight cap and retries without "
        "spending an attempt; lower `concurrency` (or use `concurrency: auto`) so the queue stays short, or raise "
        "`retry.read_timeout_s` if single answers take that long.",
        severity="warning",
    )


def uploads_behind(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    age = c.upload_oldest_s
    if not c.upload_pending or age is None or (age < t.upload_behind_s and not c.upload_held):
        return None
    held = c.upload_held or "no"
    return Finding(
        summary=f"{c.upload_pending:,} sealed shards wait for upload, the oldest for {duration(age)}"
        + (f"; last store error: {c.upload_error}" if c.upload_error else ""),
        evidence=(
            ("shards waiting", f"{c.upload_pending:,} ({num(c.upload_pending_bytes / 1e6)} MB)"),
            ("oldest waiting", duration(age)),
            ("last store error", c.upload_error or "-"),
            ("generation paused", held),
        ),
        advice="The store is not taking the shards as fast as they are sealed: check output.remote's reachability "
        "and credentials (the last error above). Nothing is lost: shards stay on the local disk and upload as soon "
        "as the store answers. `output.upload.max_backlog` pauses generation past a backlog, so a long outage does "
        "not fill the disk.",
        severity="critical" if c.upload_error else "warning",
    )


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
        summary=f"queue {num(v.queued)}, running {_running(v)}; client in flight {limit}; the pools hold {hold}",
        evidence=(
            ("server queue", num(v.queued)),
            ("running / max running", _running(v)),
            ("client in flight / limit", limit),
            ("requests the pools hold", f"{hold}: {held_by}"),
            ("server decode tok/s", _tok_s(v, v.decode_tok_s)),
        ),
        advice=f"The server could run {num(hold - v.running)} more requests but is not sent them: its queue is "
        f"empty while the client sits at its in-flight limit. Raise the per-server concurrency to about {want} "
        f"(`concurrency: {want}` in the job, or --concurrency {want}): what {held_by} holds, plus a small queue.",
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


def state_pool_bound(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not hybrid(v) or not _waiting(v, t) or _state_sized_to_cap(v):
        return None
    if v.kv_usage is not None and v.kv_usage >= t.pool_full:
        return None
    if not (_state_full(v, t) or _state_capped(o, t)):
        return None
    info = v.info
    slots, per = advice.state_slots(o), advice.slots_per_request(info)
    hit = v.prefix_hit_rate
    radix_on = info is not None and info.radix_cache
    cands: list[Candidate] = []
    if radix_on and (hit is None or hit < t.low_cache_hit):
        cands.append(advice.radix_off(o, c, t.pool_full))
    if radix_on and info is not None and info.strategy == "extra_buffer":
        cands.append(advice.lazy_buffer(o))
    if info is None or info.mamba_ssm_dtype not in HALF_DTYPES:
        cands.append(advice.bf16_state(o))
    cap_text = f"{slots} slots // {per}" if slots and per else "state slots"
    mode = UNKNOWN
    if info is not None:
        mode = "radix cache off" if info.disable_radix_cache else f"{info.strategy or 'auto'} + radix cache"
    why = ""
    if radix_on and (hit is None or hit < t.low_cache_hit):
        why = (
            f" Prompts share little prefix (cache hit {pct(hit)}), so the radix cache only costs state slots: "
            "turn it off and set the running cap explicitly."
        )
    return Finding(
        summary=f"running {_running(v)} with {num(v.queued)} queued; state pool {pct(v.state_usage)}, "
        f"KV only {pct(v.kv_usage)}",
        evidence=(
            ("running / max running", _running(v)),
            ("queue", num(v.queued)),
            ("state pool usage", pct(v.state_usage)),
            ("KV pool usage", pct(v.kv_usage)),
            ("cap from the state pool", cap_text),
            ("state mode", mode),
            ("state slots held per request", num(v.state_slots_per_request)),
            ("SSM state dtype", (info.mamba_ssm_dtype if info else None) or "float32 (default)"),
            ("prefix cache hit rate", pct(hit)),
        ),
        advice="The recurrent-state (Mamba) pool limits how many requests run at once while the KV pool has "
        "room." + why + " A bfloat16 SSM state halves each slot.",
        candidates=tuple(cands),
    )


def kv_bound(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not _waiting(v, t) or v.kv_usage is None:
        return None
    reserve = _kv_reserve_full(o, c)
    if v.kv_usage < t.pool_full and reserve is None:
        return None
    if _state_full(v, t):
        return None  # both full: the state rule speaks for the pools
    info = v.info
    cands: list[Candidate] = []
    if info is None or "fp8" not in (info.kv_cache_dtype or ""):
        cands.append(advice.kv_fp8(o))
    more = advice.mem_fraction(o)
    if more is not None:
        cands.append(more)
    if hybrid(v) and info is not None:
        if info.disable_radix_cache and info.mamba_ssm_dtype not in HALF_DTYPES:
            cands.append(advice.bf16_state(o))
        elif info.radix_cache and (v.state_usage or 0) < t.pool_roomy:
            cands.append(advice.state_ratio(o, 0.5))
    fits = f"{reserve[0]} x {num(reserve[1])} tokens in {num(advice.kv_tokens(o))}" if reserve else None
    summary = f"KV pool {pct(v.kv_usage)} with {num(v.queued)} queued; running {_running(v)}"
    why = "The KV cache is full and requests wait for room: the running requests' contexts fill it."
    if reserve is not None:
        summary += f"; {reserve[0]} requests of up to {num(reserve[1])} tokens fill it"
        why = (
            f"Requests wait although the KV gauge shows room: SGLang admits a request only when its prompt and "
            f"its whole max_tokens fit beside the running ones, and only {reserve[0]} requests of up to "
            f"{num(reserve[1])} tokens fit in the pool."
        )
    return Finding(
        summary=summary,
        evidence=(
            ("KV pool usage", pct(v.kv_usage)),
            ("queue", num(v.queued)),
            ("running / max running", _running(v)),
            ("tokens per running request", num(v.avg_context)),
            ("requests that fit at full length", fits or "-"),
            ("retractions per minute", num(v.preemptions_per_min)),
            ("state pool usage", pct(v.state_usage)),
        ),
        advice=why + " Give the KV pool more memory (fp8 KV cache, a larger --mem-fraction-static) or generate "
        "shorter outputs (sampling.max_tokens).",
        candidates=tuple(cands),
    )


def retractions(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    rate = v.preemptions_per_min
    if not v.healthy or rate is None or rate < t.retractions_per_min:
        return None
    sglang = v.engine == "sglang"
    cands: tuple[Candidate, ...] = ()
    if sglang:
        cur = (v.info.schedule_conservativeness if v.info else None) or 1.0
        cands = (advice.conservativeness(o, round(cur * 1.3, 2)),)
    what = "retractions" if sglang else "preemptions"
    return Finding(
        summary=f"{num(rate)} {what}/min; KV pool {pct(v.kv_usage)}, running {_running(v)}",
        evidence=((f"{what} per minute", num(rate)), ("KV pool usage", pct(v.kv_usage)), ("running", _running(v))),
        advice="Running requests are thrown back to the queue because the KV cache ran out while they grew; "
        "their work is redone. "
        + (
            "Admit less eagerly (a higher --schedule-conservativeness) or give the KV pool more memory."
            if sglang
            else "Lower --max-num-seqs or raise --gpu-memory-utilization."
        ),
        candidates=cands,
    )


def scheduler_conservative(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or v.engine != "sglang" or not _waiting(v, t) or not v.max_running or v.running is None:
        return None
    if v.queued_min is not None and v.queued_min < t.queue_waiting:
        return None  # the queue drains now and then: arrivals waiting for a prefill, not held back
    if _at_cap(v, t) or v.kv_usage is None or v.kv_usage >= t.pool_roomy or _kv_reserve_full(o, c):
        return None
    if v.state_usage is not None and v.state_usage >= t.pool_roomy and not _state_sized_to_cap(v):
        return None
    if v.preemptions_per_min:
        return None
    return Finding(
        summary=f"{num(v.queued)} queued while running {_running(v)} and KV {pct(v.kv_usage)}",
        evidence=(
            ("queue", num(v.queued)),
            ("running / max running", _running(v)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
        ),
        advice="Requests wait although the batch and both pools have room: the scheduler reserves room for "
        "outputs that do not come. Lower --schedule-conservativeness (SGLang's tuning guide suggests 0.3).",
        candidates=(advice.conservativeness(o, 0.3),),
    )


def _compute(o: ServerObs) -> bool:
    """The planner's roofline puts the server's decode step on the compute side."""
    return o.plan is not None and o.plan.bound == "compute"


def _roofline(o: ServerObs) -> str:
    return f"{o.plan.bound} (planner)" if o.plan is not None and o.plan.bound else UNKNOWN


def running_cap(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not _waiting(v, t) or not _at_cap(v, t) or _compute(o):
        return None
    if _state_capped(o, t) and not _state_sized_to_cap(v):
        return None  # the state pool's cap: the state rule speaks
    if (v.kv_usage is not None and v.kv_usage >= t.pool_full) or _state_full(v, t) or _kv_reserve_full(o, c):
        return None  # a full pool: its rule speaks
    cands: list[Candidate] = []
    if v.engine == "sglang":
        if _state_sized_to_cap(v):
            bigger = advice.fill_cap(o, c, t.pool_full)
            cands += [bigger] if bigger is not None else []
            info = v.info
            if info is not None and info.mamba_ssm_dtype not in HALF_DTYPES:
                cands.append(advice.bf16_state(o))
        elif v.max_running:
            cands.append(advice.max_running(o, v.max_running * 2))
        fp8 = advice.fp8_weights(o)
        cands += [fp8] if fp8 is not None else []
    per_req = (v.decode_tok_s or 0) / v.running if v.running else None
    return Finding(
        summary=f"running {_running(v)} at its cap with {num(v.queued)} queued; KV {pct(v.kv_usage)}, "
        f"state {pct(v.state_usage)}",
        evidence=(
            ("running / max running", _running(v)),
            ("queue", num(v.queued)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
            ("decode step (roofline)", _roofline(o)),
            ("decode tok/s", _tok_s(v, v.decode_tok_s)),
            ("tok/s per running request", _tok_s(v, per_req)),
        ),
        advice="The server runs as many requests as its cap allows and requests wait, while neither pool is what "
        "stops more: the cap binds. A memory-bound decode step reads the same weights for a larger batch, so "
        "raise --max-running-requests as far as memory holds (the prediction says how far), or make the weights "
        "smaller (fp8).",
        candidates=tuple(cands),
    )


def compute_bound(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not _compute(o) or not (_waiting(v, t) or _at_cap(v, t)):
        return None
    fp8 = advice.fp8_weights(o) if v.engine == "sglang" else None
    per_req = (v.decode_tok_s or 0) / v.running if v.running else None
    return Finding(
        summary=f"running {_running(v)}, decode step compute-bound (roofline); "
        f"{_tok_s(v, v.decode_tok_s)} decode tok/s",
        evidence=(
            ("running / max running", _running(v)),
            ("queue", num(v.queued)),
            ("decode step (roofline)", _roofline(o)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
            ("decode tok/s", _tok_s(v, v.decode_tok_s)),
            ("tok/s per running request", _tok_s(v, per_req)),
        ),
        advice="The decode step is on the compute side of the roofline: the GPU's tensor throughput sets the rate "
        "and a larger batch does not help. Use fp8 weights (the FP8 tensor peak, on GPUs that have one) or add "
        "servers.",
        candidates=(fp8,) if fp8 is not None else (),
        severity="info",
    )


def prefill_heavy(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not (v.decode_tok_s or v.prompt_tok_s):
        return None  # an idle server prefills nothing
    ratio = v.prompt_tok_s / v.decode_tok_s if v.prompt_tok_s and v.decode_tok_s else None
    share = o.plan.prefill_share if o.plan is not None else None
    dominates = share is not None and share >= t.prefill_dominates
    if not dominates and (ratio is None or ratio < t.prefill_ratio):
        return None
    chunk = v.info.chunked_prefill_size if v.info is not None else None
    bigger = max(8192, 2 * chunk) if chunk and chunk > 0 else 8192
    hit = v.prefix_hit_rate
    cands: list[Candidate] = []
    fp8 = advice.fp8_weights(o) if v.engine == "sglang" else None
    cands += [fp8] if fp8 is not None else []
    cands += [
        Candidate(change="--enable-mixed-chunk", flags_after=()),
        Candidate(change=f"--chunked-prefill-size {bigger}", flags_after=()),
    ]
    ratio_text = f"{ratio:.1f}x" if ratio is not None else UNKNOWN
    return Finding(
        summary=f"{num(v.prompt_tok_s)} prompt tok/s vs {num(v.decode_tok_s)} decode tok/s ({ratio_text}); "
        f"prefill {pct(share)} of the GPU's time",
        evidence=(
            ("prompt tok/s", _tok_s(v, v.prompt_tok_s)),
            ("decode tok/s", _tok_s(v, v.decode_tok_s)),
            ("prompt / output", ratio_text),
            ("prefill share of GPU time (planner)", pct(share)),
            ("avg prompt tokens (client)", num(c.avg_prompt_tokens)),
            ("avg output tokens (client)", num(c.avg_output_tokens)),
            ("prefix cache hit rate", pct(hit)),
        ),
        advice="Most of the GPU's time goes to prompts, which pause decoding, and prefill is compute-bound: "
        "faster matrix units (fp8 weights) shorten it; decode can run during prefill (--enable-mixed-chunk), "
        "prefill in larger chunks, and keep the radix cache if prompts share prefixes.",
        candidates=tuple(cands),
        severity="warning" if dominates else "info",
    )


# ---- the table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    binds: str  # the resource that limits throughput when the rule fires ("" for a rule about the corpus)
    when: str  # the condition, in words
    check: ServerCheck | None = None  # per server
    check_client: ClientCheck | None = None  # once for the whole client


RULES: tuple[Rule, ...] = (
    Rule("server-down", "server down", "server availability",
         "unreachable for down_after_s, or set aside by the client", check=server_down),
    Rule("flapping", "server flapping", "server availability",
         "flap_transitions up/down changes within flap_window_s", check=flapping),
    Rule("truncated", "answers cut at max_tokens", "",  # the corpus's loss, not a throughput limit
         "at least truncated_share of the answers (after truncated_min_answers) hit max_tokens (finish reason "
         "length)", check_client=truncation),
    Rule("queue-timeout", "queue wait exceeds the read timeout", "client concurrency",
         "a request outlived retry.read_timeout_s on a server that held a queue or kept answering (overload), "
         "within timeout_recent_s", check=queue_timeout),
    Rule("uploads-behind", "uploads behind", "",  # the durable copy's lag, not a throughput limit
         "sealed shards wait for upload, the oldest for upload_behind_s, or generation is paused for the backlog",
         check_client=uploads_behind),
    Rule("client-bound", "client bound", "client CPU",
         "client CPU >= client_cpu or event-loop lag >= loop_lag_s, while most servers have no queue",
         check_client=client_bound),
    Rule("client-underfeeding", "client under-feeding", "client concurrency",
         "queue empty, running below at_cap x max running, client in flight at its limit (within one request)",
         check=client_underfeeding),
    Rule("state-pool-bound", "state-pool bound", "state pool",
         "requests queued, KV below pool_full, and the state pool full or the cap = state slots // S",
         check=state_pool_bound),
    Rule("kv-bound", "KV bound", "KV cache",
         "requests queued and the KV pool at least pool_full, or one more request at its full length (prompt + "
         "max_tokens) would not fit beside the running ones", check=kv_bound),
    Rule("retractions", "retractions / preemptions", "KV cache",
         "at least retractions_per_min retractions (SGLang) or preemptions (vLLM) per minute", check=retractions),
    Rule("scheduler-conservative", "conservative admission", "scheduler",
         "a queue that never empties while running is below the cap and both pools below pool_roomy",
         check=scheduler_conservative),
    Rule("running-cap", "at its running cap", "running cap",
         "requests queued, running at the cap, neither pool full, the decode step not compute-bound",
         check=running_cap),
    Rule("compute-bound", "compute bound", "compute",
         "requests queued or running at the cap, and the planner's roofline puts the decode step on the compute "
         "side", check=compute_bound),
    Rule("prefill-heavy", "prefill heavy", "prefill",
         "prompt tok/s at least prefill_ratio x decode tok/s, or prefill at least prefill_dominates of the GPU's "
         "time (planner)", check=prefill_heavy),
)  # fmt: skip

RULE_IDS = tuple(r.id for r in RULES)
