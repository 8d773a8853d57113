"""Concrete SGLang flag changes the rules recommend, with estimates from the observed numbers alone.

Each builder returns a :class:`~tokenmill.doctor.model.Candidate`: the flags to type, and the server's full
sizing flags after the change (so the planner, when it knows the model and GPU, can predict both sides).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from tokenmill.doctor.model import Candidate, ClientObs, ServerObs
from tokenmill.monitor.info import NEW_STRATEGY_FLAG, OLD_STRATEGY_FLAG, ServerInfo, launch_flags

# state slots SGLang reserves per running request (docs/reference/sglang.md §2.3)
_SLOTS_PER_REQUEST = {"no_buffer": 3, "extra_buffer": 5, "extra_buffer_lazy": 4}
_VALUE_FLAGS = frozenset(
    {
        OLD_STRATEGY_FLAG,
        NEW_STRATEGY_FLAG,
        "--max-running-requests",
        "--mamba-ssm-dtype",
        "--kv-cache-dtype",
        "--mem-fraction-static",
        "--mamba-full-memory-ratio",
        "--schedule-conservativeness",
        "--tp-size",
        "--quantization",
        "--page-size",
        "--context-length",
        "--max-total-tokens",
    }
)


MAX_TOKENS_STEP = 1024  # a suggested max_tokens is rounded up to a multiple of this

# flags whose change moves what SGLang keeps outside its static pools, or what runs there: a prediction of such a
# change states its out-of-memory risk
MEMORY_FLAGS = ("--mem-fraction-static", "--kv-cache-dtype", "--quantization", "--chunked-prefill-size")


def touches_memory(change: str) -> bool:
    return any(flag in change.split() for flag in MEMORY_FLAGS)


def slots_per_request(info: ServerInfo | None) -> int | None:
    """The divisor of SGLang's state-slot cap (1 with the radix cache off); None when unknown (``auto``)."""
    if info is None:
        return None
    if info.disable_radix_cache:
        return 1
    if info.strategy == "extra_buffer" and info.disable_overlap_schedule:
        return 4
    return _SLOTS_PER_REQUEST.get(info.strategy or "")


def state_slots(obs: ServerObs) -> int | None:
    """State slots per rank: as /server_info's ``internal_states`` report them, else the slot gauges."""
    info, snap = obs.view.info, obs.view.snapshot
    if info is not None and info.state_slots:
        return info.state_slots
    total = snap.state_slots_total if snap is not None else None
    dp = info.dp_size if info is not None else 1
    return int(total // dp) if total else None


def kv_tokens(obs: ServerObs) -> int | None:
    """KV pool tokens per rank."""
    info, snap = obs.view.info, obs.view.snapshot
    if info is not None and info.max_total_tokens:
        return info.max_total_tokens
    dp = info.dp_size if info is not None else 1
    cap = snap.kv_tokens_capacity if snap is not None else None
    return int(cap // dp) if cap else None


def avg_context(obs: ServerObs, client: ClientObs) -> float | None:
    """Tokens a running request holds: measured by the server, else prompt + half the output (client)."""
    if obs.view.avg_context:
        return obs.view.avg_context
    if client.avg_prompt_tokens is not None and client.avg_output_tokens is not None:
        return client.avg_prompt_tokens + client.avg_output_tokens / 2
    return None


def state_cap(obs: ServerObs) -> int | None:
    """The cap the state pool alone imposes: slots // slots per request."""
    slots, per = state_slots(obs), slots_per_request(obs.view.info)
    return slots // per if slots and per else None


def current_flags(obs: ServerObs) -> list[str]:
    return launch_flags(obs.view.info) if obs.view.info is not None else []


def set_flag(flags: Sequence[str], flag: str, value: str | None = None, drop: Sequence[str] = ()) -> list[str]:
    """``flags`` with ``flag`` set to ``value`` (a switch when None) and every flag in ``drop`` removed."""
    out: list[str] = []
    skip = {flag, *drop}
    i = 0
    while i < len(flags):
        tok = flags[i]
        takes_value = tok in _VALUE_FLAGS
        if tok in skip:
            i += 2 if takes_value else 1
            continue
        out.append(tok)
        if takes_value and i + 1 < len(flags):
            out.append(flags[i + 1])
            i += 1
        i += 1
    out += [flag] if value is None else [flag, value]
    return out


def radix_off(obs: ServerObs, client: ClientObs, fill: float) -> Candidate:
    """``--disable-radix-cache --max-running-requests N``: N slots for N requests, KV gets the rest.

    N from the observations keeps the state memory where it is (N <= today's slots) and fits N requests of
    the measured context in ``fill`` of the KV pool, so it can only gain; the planner refines it.
    """
    flags = current_flags(obs)
    info = obs.view.info
    drop = [OLD_STRATEGY_FLAG, NEW_STRATEGY_FLAG]
    change = ["--disable-radix-cache"]
    if info is not None and (info.strategy or "").startswith("extra_buffer"):
        # every build refuses extra_buffer without the radix cache (0.5.23: "needs mamba state"); auto is
        # left unresolved with the radix cache off, and no_buffer would need --disable-overlap-schedule
        flags = set_flag(flags, info.strategy_flag, "auto", drop=drop)
        change = [info.strategy_flag, "auto", *change]
    slots, kv, ctx = state_slots(obs), kv_tokens(obs), avg_context(obs, client)
    n: int | None = slots
    if slots and kv and ctx:
        n = max(1, min(slots, math.floor(fill * kv / ctx)))
    flags = set_flag(flags, "--disable-radix-cache")
    if n is not None:
        flags = set_flag(flags, "--max-running-requests", str(n))
        change += ["--max-running-requests", str(n)]
    return Candidate(
        change=" ".join(change),
        flags_after=tuple(flags),
        est_max_running=n,
        note="for prompts that share no prefixes (single-turn data); keeps the overlap scheduler",
        fill_memory=True,
    )


def fill_cap(obs: ServerObs, client: ClientObs, fill: float) -> Candidate | None:
    """Radix cache already off: ``--max-running-requests N``, more requests while the KV pool has room for them.
    The state pool is sized to the cap, so a larger cap takes memory from the KV pool: the planner picks the N
    where both run out together (and drops the change when today's cap is it). None when the KV pool has no
    room for more requests of the mean context."""
    kv, ctx, cap = kv_tokens(obs), avg_context(obs, client), obs.view.max_running
    if not kv or not ctx or not cap:
        return None
    n = min(2 * cap, math.floor(fill * kv / ctx))
    if n <= cap:
        return None
    return Candidate(
        change=f"--max-running-requests {n}",
        flags_after=tuple(set_flag(current_flags(obs), "--max-running-requests", str(n))),
        est_max_running=n,
        note="with the radix cache off the state pool is sized to the cap: a larger cap takes memory from the KV pool",
        fill_memory=True,
    )


def fp8_weights(obs: ServerObs) -> Candidate | None:
    """``--quantization fp8``: online FP8 quantization of a 16-bit checkpoint (half the weight bytes, the FP8
    tensor peak for prefill and compute-bound steps, more memory for the pools). None when already quantized."""
    info = obs.view.info
    if info is not None and info.quantization:
        return None
    return Candidate(
        change="--quantization fp8",
        flags_after=tuple(set_flag(current_flags(obs), "--quantization", "fp8")),
        note="online FP8 quantization of the checkpoint's weights: check output quality before a long run",
    )


def pool_hold(obs: ServerObs, client: ClientObs, fill: float) -> tuple[int, str] | None:
    """How many requests of the mean context the server's pools hold at once (KV at ``fill``, the state slots),
    within its cap, and what holds them to that; None when the cap is unknown."""
    cap = obs.view.max_running
    if not cap:
        return None
    limits: list[tuple[int, str]] = [(cap, f"the running cap ({cap})")]
    kv, ctx = kv_tokens(obs), avg_context(obs, client)
    if kv and ctx:
        n = max(1, math.floor(fill * kv / ctx))
        limits.append((n, f"the KV pool ({n} requests of {ctx:,.0f} tokens in {kv:,})"))
    scap = state_cap(obs)
    if scap:
        limits.append((scap, f"the state pool ({state_slots(obs)} slots // {slots_per_request(obs.view.info)})"))
    return min(limits, key=lambda x: x[0])


def lazy_buffer(obs: ServerObs) -> Candidate:
    cap, per = state_cap(obs), slots_per_request(obs.view.info)
    slots = state_slots(obs)
    flags = set_flag(current_flags(obs), NEW_STRATEGY_FLAG, "extra_buffer_lazy", drop=[OLD_STRATEGY_FLAG])
    return Candidate(
        change=f"{NEW_STRATEGY_FLAG} extra_buffer_lazy",
        flags_after=tuple(flags),
        est_max_running=slots // 4 if slots and per and cap else None,
        note="keeps the radix cache with 4 state slots per request instead of 5 (needs a build with PR #27118)",
    )


def bf16_state(obs: ServerObs) -> Candidate:
    cap = obs.view.max_running
    radix_on = obs.view.info is not None and obs.view.info.radix_cache
    return Candidate(
        change="--mamba-ssm-dtype bfloat16",
        flags_after=tuple(set_flag(current_flags(obs), "--mamba-ssm-dtype", "bfloat16")),
        # the same state budget holds twice the slots when the pool is ratio-sized
        est_max_running=cap * 2 if cap and radix_on else None,
        note="halves the SSM state per request; documented as less accurate than float32",
    )


def kv_fp8(obs: ServerObs) -> Candidate:
    return Candidate(
        change="--kv-cache-dtype fp8_e4m3",
        flags_after=tuple(set_flag(current_flags(obs), "--kv-cache-dtype", "fp8_e4m3")),
        note="twice the KV tokens in the same memory; fp8 rounding of the cached keys and values can change "
        "answers slightly",
    )


def trained_max_tokens(client: ClientObs, target: float) -> int | None:
    """A lower max_tokens near what will be trained: the trainer's maximum sequence length less the mean prompt
    when it is given (what is longer is cut at training anyway), else the length that would cut about ``target``
    of the answers, from a log-normal fitted to the median and p90 of the answers that were not cut (rounded up to
    a multiple of ``MAX_TOKENS_STEP``); None without either, or when it would not be lower than today's."""
    limit, p50, p90 = client.max_tokens, client.completed_p50, client.completed_p90
    if limit and client.train_max_length:
        fits = client.train_max_length - round(client.avg_prompt_tokens or 0.0)
        return fits if 0 < fits < limit else None
    if not limit or not p50 or not p90 or not 0 < p50 < p90:
        return None
    z = NormalDist().inv_cdf
    sigma = (math.log(p90) - math.log(p50)) / z(0.9)
    want = math.ceil(math.exp(math.log(p50) + sigma * z(1 - target)) / MAX_TOKENS_STEP) * MAX_TOKENS_STEP
    return want if want < limit else None


def max_tokens(obs: ServerObs, client: ClientObs, n: int) -> Candidate:
    """``--max-tokens N`` (sampling.max_tokens): each request reserves KV room for less output."""
    return Candidate(
        change=f"--max-tokens {n}",
        flags_after=tuple(current_flags(obs)),
        kind="client",
        max_tokens=n,
        note=f"answers longer than {n:,} tokens are cut (today's limit {client.max_tokens:,}): "
        + (
            f"what the trainer's {client.train_max_length:,} tokens hold after the prompt"
            if client.train_max_length
            else "set it to the longest answer the drafter will be trained on (--train-max-length says)"
        ),
    )


def mem_fraction(obs: ServerObs, step: float = 0.03, ceiling: float = 0.93) -> Candidate | None:
    """A larger static share; None when unknown, at the ceiling, or when --max-total-tokens sizes the KV pool (a
    larger share would not grow it: :func:`kv_tokens_flag` is the change then)."""
    info = obs.view.info
    if info is None or info.mem_fraction_static is None or info.mem_fraction_static + step > ceiling:
        return None
    if info.max_total_tokens_flag is not None:
        return None
    value = f"{info.mem_fraction_static + step:.2f}"
    return Candidate(
        change=f"--mem-fraction-static {value}",
        flags_after=tuple(set_flag(current_flags(obs), "--mem-fraction-static", value)),
        note="more memory for the pools; watch for out-of-memory errors in the server log",
    )


def kv_tokens_flag(obs: ServerObs) -> Candidate | None:
    """``--max-total-tokens 2N`` for a server whose KV pool is sized by ``--max-total-tokens N``."""
    info = obs.view.info
    if info is None or info.max_total_tokens_flag is None:
        return None
    value = str(2 * info.max_total_tokens_flag)
    return Candidate(
        change=f"--max-total-tokens {value}",
        flags_after=tuple(set_flag(current_flags(obs), "--max-total-tokens", value)),
        note="the KV pool is sized by --max-total-tokens: a larger one needs the memory for it",
    )


def state_ratio(obs: ServerObs, ratio: float) -> Candidate:
    return Candidate(
        change=f"--mamba-full-memory-ratio {ratio:g}",
        flags_after=tuple(set_flag(current_flags(obs), "--mamba-full-memory-ratio", f"{ratio:g}")),
        note="moves memory between the state pool and the KV pool (0.9 is SGLang's default)",
    )


def max_running(obs: ServerObs, n: int) -> Candidate:
    return Candidate(
        change=f"--max-running-requests {n}",
        flags_after=tuple(set_flag(current_flags(obs), "--max-running-requests", str(n))),
        est_max_running=n,
    )


def conservativeness(obs: ServerObs, value: float) -> Candidate:
    return Candidate(
        change=f"--schedule-conservativeness {value:g}",
        flags_after=tuple(set_flag(current_flags(obs), "--schedule-conservativeness", f"{value:g}")),
    )


def suggested_max_tokens(client: ClientObs, target: float) -> int | None:
    """A max_tokens that would cut about ``target`` of the answers, from a log-normal fitted to what was seen.

    Answers cut at max_tokens M hide their length, so the fit uses two quantiles that are known: the whole
    answers' median sits at the ``(1 - s) / 2`` quantile of all answers (s: the share cut), M at ``1 - s``.
    Without a usable median the limit is doubled. Rounded up to a multiple of ``MAX_TOKENS_STEP``, above M."""
    limit, share, median = client.max_tokens, client.truncated_share, client.completed_p50
    if not limit or share is None or share <= 0:
        return None
    if share >= 1 or median is None or not 0 < median < limit:
        want = 2.0 * limit
    else:
        z = NormalDist().inv_cdf
        sigma = (math.log(limit) - math.log(median)) / (z(1 - share) - z((1 - share) / 2))
        mu = math.log(limit) - sigma * z(1 - share)
        want = math.exp(mu + sigma * z(1 - target))
    want = max(min(want, 16.0 * limit), limit + 1.0)
    return math.ceil(want / MAX_TOKENS_STEP) * MAX_TOKENS_STEP
