"""What the doctor's checks read off a server: waiting, at its cap, which pool is full, which side of the roofline.

Also its rates as the checks show them (a twin's on the GPU's clock)."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import ClientObs, ServerObs
from tokenmill.fmt import UNKNOWN, num
from tokenmill.monitor.fleet import ServerView
from tokenmill.planner.admission import (
    CLIP_MAX_NEW_TOKENS,
    admission_need,
    concurrent_at_full_length,
    min_new_token_ratio,
    running_reserve,
)

HALF_DTYPES = ("bfloat16", "float16", "bf16", "fp16")


def waiting(v: ServerView, t: DoctorSpec) -> bool:
    return v.queued is not None and v.queued >= t.queue_waiting


def peak(v: ServerView) -> float | None:
    """The most requests seen running at once in the window (the mean when the peak is unknown)."""
    return v.running_peak if v.running_peak is not None else v.running


def at_cap(v: ServerView, t: DoctorSpec) -> bool:
    """The server reached its running cap in the window. SGLang writes its gauges at batch boundaries, so a
    window mean of them lags; the peak shows a cap that binds (:func:`running_text` shows it beside the mean)."""
    running = peak(v)
    return running is not None and bool(v.max_running) and running >= t.at_cap * (v.max_running or 0)


def below_cap(v: ServerView, t: DoctorSpec) -> bool:
    """Over the window the server ran below its cap: the mean running short of ``at_cap`` of it (an unknown cap
    counts as below: nothing says the cap binds)."""
    if v.running is None:
        return False
    return not v.max_running or v.running < t.at_cap * v.max_running


def state_capped(o: ServerObs, t: DoctorSpec) -> bool:
    """At the cap, and the cap is the state pool's: slots // slots-per-request."""
    scap = advice.state_cap(o)
    v = o.view
    return scap is not None and v.max_running is not None and v.max_running <= scap + 1 and at_cap(v, t)


def state_sized_to_cap(v: ServerView) -> bool:
    """Radix cache off with an explicit cap (and no explicit slot count): SGLang sizes the state pool to
    exactly the cap, so a full state pool is by construction and the cap itself is what binds. Never for a
    server that says it has no state pool (a dense model)."""
    info = v.info
    return (
        info is not None
        and info.hybrid is not False
        and bool(info.disable_radix_cache)
        and info.max_running_flag is not None
        and info.max_mamba_cache_size is None
    )


def state_full(v: ServerView, t: DoctorSpec) -> bool:
    return v.state_usage is not None and v.state_usage >= t.pool_full and not state_sized_to_cap(v)


def hybrid(v: ServerView) -> bool:
    """A recurrent-state pool exists: /server_info says so, else the slot gauges (SGLang exports the state
    gauges at 0 for a pure transformer, so their presence proves nothing)."""
    if v.info is not None and v.info.hybrid is not None:
        return v.info.hybrid
    snap = v.snapshot
    if snap is not None and snap.hybrid is not None:
        return snap.hybrid
    return v.state_usage is not None and v.state_usage > 0


def full_length_tokens(c: ClientObs) -> float | None:
    """Tokens SGLang reserves for one request at admission: its prompt plus its output limit (the job's
    max_tokens, of which SGLang counts at most ``CLIP_MAX_NEW_TOKENS``; else the longest the client has seen on
    average)."""
    out = min(c.max_tokens, CLIP_MAX_NEW_TOKENS) if c.max_tokens else c.avg_output_tokens
    if not out:
        return None
    return (c.avg_prompt_tokens or 0.0) + out


def kv_reserve_full(o: ServerObs, c: ClientObs) -> tuple[int, int] | None:
    """SGLang admits a request only if its prompt and whole (clipped) output limit fit beside what the running
    requests hold and reserve (:mod:`tokenmill.planner.admission`): ``ignore_eos`` requests reserve their whole
    remaining output, ordinary ones the settled new-token ratio of it beside what they hold. When the running
    set plus one more request at full length overflows the KV pool, the KV pool binds even if its usage gauge
    shows room. Returns (requests that fit at full length, tokens each)."""
    per, kv = full_length_tokens(c), advice.kv_tokens(o)
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


def rate_text(v: ServerView, rate: float | None) -> str:
    """A rate the server measured; a twin's (``/server_info`` says its time scale s) runs 1/s times the GPU's, so
    it is shown with its value on the GPU's clock, the one the planner's predictions beside it are on."""
    scale = v.info.time_scale if v.info is not None else None
    if rate is None or not scale or scale == 1.0:
        return num(rate)
    return f"{num(rate)} (a twin at time scale {scale:g}: {num(rate * scale)} on the GPU's clock)"


def running_text(v: ServerView) -> str:
    """Running over the cap as the window's mean, with its peak beside it when that differs: the rules decide
    "at the cap" on the peak and "below the cap" on the mean, so both numbers they decide on are shown."""
    text = f"{num(v.running)}/{v.max_running if v.max_running else '?'}"
    top = v.running_peak
    if top is not None and v.running is not None and round(top) != round(v.running):
        text += f" (mean; peak {num(top)})"
    return text


def queue_text(v: ServerView) -> str:
    """The window's mean queue, with its least when that differs (a rule that asks whether the queue ever
    emptied decides on the least)."""
    text = num(v.queued)
    if v.queued_min is not None and v.queued is not None and round(v.queued_min) != round(v.queued):
        text += f" (mean; least {num(v.queued_min)})"
    return text


def kv_admission(o: ServerObs, c: ClientObs, t: DoctorSpec) -> str | None:
    """Why the KV pool holds admission back while requests wait, or None: the pool is full, one more request at
    full length would not fit beside what the running ones hold and reserve, or the pool is high (``pool_roomy``)
    while the server runs below its cap (what stops more requests is not the cap, so it is the KV pool)."""
    v = o.view
    if not v.healthy or not waiting(v, t) or v.kv_usage is None:
        return None
    if v.kv_usage >= t.pool_full:
        return "full"
    if kv_reserve_full(o, c) is not None:
        return "reserve"
    if v.kv_usage >= t.pool_roomy and below_cap(v, t):
        return "high"
    return None


def compute_side(o: ServerObs) -> bool:
    """The planner's roofline puts the server's decode step on the compute side."""
    return o.plan is not None and o.plan.bound == "compute"


def roofline_text(o: ServerObs) -> str:
    return f"{o.plan.bound} (planner)" if o.plan is not None and o.plan.bound else UNKNOWN
