"""The decode step against its roofline: the running cap, compute, prefill."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.checks.signs import (
    HALF_DTYPES,
    at_cap,
    compute_side,
    kv_admission,
    rate_text,
    roofline_text,
    running_text,
    state_capped,
    state_full,
    state_sized_to_cap,
    waiting,
)
from tokenmill.doctor.model import Candidate, ClientObs, Finding, ServerObs
from tokenmill.fmt import UNKNOWN, num, pct


def running_cap(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not waiting(v, t) or not at_cap(v, t) or compute_side(o):
        return None
    if state_capped(o, t) and not state_sized_to_cap(v):
        return None  # the state pool's cap: the state rule speaks
    if kv_admission(o, c, t) is not None or state_full(v, t):
        return None  # a pool holds admission back: its rule speaks
    cands: list[Candidate] = []
    if v.engine == "sglang":
        if state_sized_to_cap(v):
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
        summary=f"running {running_text(v)} at its cap with {num(v.queued)} queued; "
        f"KV {pct(v.kv_usage)}, state {pct(v.state_usage)}",
        evidence=(
            ("running / max running", running_text(v)),
            ("queue", num(v.queued)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
            ("decode step (roofline)", roofline_text(o)),
            ("decode tok/s", rate_text(v, v.decode_tok_s)),
            ("tok/s per running request", rate_text(v, per_req)),
        ),
        advice="The server runs as many requests as its cap allows and requests wait, while neither pool is what "
        "stops more: the cap binds. A memory-bound decode step reads the same weights for a larger batch, so "
        "raise --max-running-requests as far as memory holds (the prediction says how far), or make the weights "
        "smaller (fp8).",
        candidates=tuple(cands),
    )


def compute_bound(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or not compute_side(o) or not (waiting(v, t) or at_cap(v, t)):
        return None
    fp8 = advice.fp8_weights(o) if v.engine == "sglang" else None
    per_req = (v.decode_tok_s or 0) / v.running if v.running else None
    return Finding(
        summary=f"running {running_text(v)}, decode step compute-bound (roofline); "
        f"{rate_text(v, v.decode_tok_s)} decode tok/s",
        evidence=(
            ("running / max running", running_text(v)),
            ("queue", num(v.queued)),
            ("decode step (roofline)", roofline_text(o)),
            ("KV pool usage", pct(v.kv_usage)),
            ("state pool usage", pct(v.state_usage)),
            ("decode tok/s", rate_text(v, v.decode_tok_s)),
            ("tok/s per running request", rate_text(v, per_req)),
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
            ("prompt tok/s", rate_text(v, v.prompt_tok_s)),
            ("decode tok/s", rate_text(v, v.decode_tok_s)),
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
