"""The memory pools and admission: state pool, KV cache, retractions, a conservative scheduler."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.checks.signs import (
    HALF_DTYPES,
    at_cap,
    hybrid,
    kv_admission,
    kv_reserve_full,
    queue_text,
    running_text,
    state_capped,
    state_full,
    state_sized_to_cap,
    waiting,
)
from tokenmill.doctor.model import Candidate, ClientObs, Finding, ServerObs
from tokenmill.fmt import UNKNOWN, num, pct


def state_pool_bound(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not hybrid(v) or not waiting(v, t) or state_sized_to_cap(v):
        return None
    if v.kv_usage is not None and v.kv_usage >= t.pool_full:
        return None
    if not (state_full(v, t) or state_capped(o, t)):
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
    more = advice.mem_fraction(o)  # a ratio-sized state pool grows with the static share
    if more is not None:
        cands.append(more)
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
        summary=f"running {running_text(v)} with {num(v.queued)} queued; state pool {pct(v.state_usage)}, "
        f"KV only {pct(v.kv_usage)}",
        evidence=(
            ("running / max running", running_text(v)),
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
    why_held = kv_admission(o, c, t)
    if why_held is None or state_full(v, t):
        return None  # both full: the state rule speaks for the pools
    reserve = kv_reserve_full(o, c)
    summary = f"{num(v.queued)} queued while running {running_text(v)}; KV pool {pct(v.kv_usage)}"
    why = {
        "full": "The KV cache is full and requests wait for room: the running requests' contexts fill it.",
        "high": f"Requests wait while the server runs below its cap and the KV pool is {pct(v.kv_usage)} full: "
        "SGLang admits a request only when its prompt and the output it reserves fit beside what the running "
        "ones hold and reserve, so the KV pool, not the cap, holds the batch where it is.",
        "reserve": "",
    }[why_held]
    if reserve is not None:
        summary += f"; {reserve[0]} requests of up to {num(reserve[1])} tokens fill it"
        if why_held == "reserve":
            what = "its whole max_tokens" if c.ignore_eos else "the output it reserves (a share of max_tokens)"
            why = (
                f"Requests wait although the KV gauge shows room: SGLang admits a request only when its prompt and "
                f"{what} fit beside what the running ones hold and reserve, and only {reserve[0]} requests of up "
                f"to {num(reserve[1])} tokens fit in the pool at full length."
            )
    fits = f"{reserve[0]} x {num(reserve[1])} tokens in {num(advice.kv_tokens(o))}" if reserve else "-"
    trim = advice.trained_max_tokens(c, t.truncated_target)
    return Finding(
        summary=summary,
        evidence=(
            ("queue", num(v.queued)),
            ("running / max running", running_text(v)),
            ("KV pool usage", pct(v.kv_usage)),
            ("held back by", _HELD[why_held]),
            ("tokens per running request", num(v.avg_context)),
            ("requests that fit at full length", fits),
            ("max_tokens (job)", num(c.max_tokens)),
            ("answers not cut: median / p90 (client)", f"{num(c.completed_p50)} / {num(c.completed_p90)}"),
            ("retractions per minute", num(v.preemptions_per_min)),
            ("state pool usage", pct(v.state_usage)),
        ),
        advice=why + " Fixes, best first: a max_tokens near the longest answer the drafter will be trained on, "
        "since each request reserves room for it"
        + (f" (here {trim:,})" if trim is not None else " (a run's answer lengths give the number)")
        + "; more memory for the pools (a larger --mem-fraction-static); on a hybrid model, memory moved from "
        "the state pool; an fp8 KV cache holds twice the tokens but changes the model's outputs.",
        candidates=tuple(_kv_fixes(o, c, t, trim)),
    )


_HELD = {
    "full": "the KV pool is full",
    "reserve": "one more request at full length does not fit (SGLang's admission reserve)",
    "high": "the KV pool is high while running is below the cap",
}


def _kv_fixes(o: ServerObs, c: ClientObs, t: DoctorSpec, trim: int | None) -> list[Candidate]:
    """The KV-admission fixes in the order of their cost to the corpus: a shorter limit (nothing lost but the
    answers longer than the training will use), more memory, a smaller state pool, then an fp8 KV cache."""
    v, info = o.view, o.view.info
    cands: list[Candidate] = []
    if trim is not None:
        cands.append(advice.max_tokens(o, c, trim))
    more = advice.mem_fraction(o) or advice.kv_tokens_flag(o)
    if more is not None:
        cands.append(more)
    if hybrid(v) and info is not None:
        if info.disable_radix_cache and info.mamba_ssm_dtype not in HALF_DTYPES:
            cands.append(advice.bf16_state(o))
        elif info.radix_cache and (v.state_usage or 0) < t.pool_roomy:
            cands.append(advice.state_ratio(o, 0.5))
    if info is None or "fp8" not in (info.kv_cache_dtype or ""):
        cands.append(advice.kv_fp8(o))
    return cands


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
        summary=f"{num(rate)} {what}/min; KV pool {pct(v.kv_usage)}, running {running_text(v)}",
        evidence=((f"{what} per minute", num(rate)), ("KV pool usage", pct(v.kv_usage)), ("running", running_text(v))),
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
    if not v.healthy or v.engine != "sglang" or not waiting(v, t) or not v.max_running or v.running is None:
        return None
    if v.queued_min is not None and v.queued_min < t.queue_waiting:
        return None  # the queue drains now and then: arrivals waiting for a prefill, not held back
    if at_cap(v, t) or v.kv_usage is None or v.kv_usage >= t.pool_roomy or kv_reserve_full(o, c):
        return None
    if v.state_usage is not None and v.state_usage >= t.pool_roomy and not state_sized_to_cap(v):
        return None
    if v.preemptions_per_min:
        return None
    return Finding(
        summary=f"{num(v.queued)} queued while running {running_text(v)} and KV {pct(v.kv_usage)}",
        evidence=(
            ("queue", queue_text(v)),
            ("running / max running", running_text(v)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
        ),
        advice="Requests wait although the batch and both pools have room: the scheduler reserves room for "
        "outputs that do not come. Lower --schedule-conservativeness (SGLang's tuning guide suggests 0.3).",
        candidates=(advice.conservativeness(o, 0.3),),
    )
