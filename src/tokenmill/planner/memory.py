"""SGLang's memory pools for one GPU of one server: weights, recurrent-state slots, KV tokens, max running.

This mirrors SGLang 0.5.23's own sizing step by step (sources are ``sglang/srt/`` files of that release;
docs/planner.md says where older releases differ):

1. ``--mem-fraction-static``: the flag, or the automatic ``round((M - reserved)/M, 3)`` with
   ``reserved = 512 + 1.5*max(chunked_prefill, 2048) + tp/8*1024 + 2*decode_graph_bs + 8*prefill_graph_sizes``
   MiB, at least 10 GiB on GPUs over 60 GiB, then times SGLang's multimodal factor for a multimodal model
   (``arg_groups/memory_hook.py``: ``handle_gpu_memory_settings``, ``reserve_for_graph_mb``,
   ``adjust_mem_fraction_for_vlm``; :mod:`tokenmill.planner.reserve`).
2. ``rest = available_before_weights * mfs - weights - multimodal_reserve``
   (``mem_cache/kv_cache_configurator.py``: ``_profile_available_bytes``, ``mm_runtime_reservation_gb``).
3. State slots (``_handle_max_mamba_cache``): ``--max-mamba-cache-size``; else ``--max-running-requests`` when
   the radix cache is disabled; else ``floor((rest * r/(1+r) - slot) / slot)`` with
   ``r = --mamba-full-memory-ratio``. The pool holds one padding slot more, which is budgeted.
4. KV tokens: ``floor((rest - (slots+1)*slot) / kv_bytes_per_token)``, capped by ``--max-total-tokens`` and
   rounded down to the page size (``model_executor/pool_configurator.py``: ``calculate_pool_sizes``).
5. Max running (``resolve_max_num_reqs``): ``min(flag, tokens//2)`` with ``--max-running-requests``, else
   ``min(clamp(tokens/context*512, 2048, 4096), tokens//2)``; then at most ``slots // S``, S being the
   slots SGLang reserves per running request (``_calculate_mamba_ratio``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.errors import DoesNotFitError
from tokenmill.planner.flags import EngineFlags
from tokenmill.planner.hardware import GIB, GpuSpec
from tokenmill.planner.models import (
    KvDtype,
    ModelSpec,
    StateDtype,
    WeightDtype,
    kv_bytes_per_token,
    state_bytes_per_slot,
    weight_bytes,
)
from tokenmill.planner.reserve import auto_mem_fraction_static, reserved_mib, vlm_mem_fraction_factor
from tokenmill.planner.strategy import StrategyChoice, resolve_strategy

__all__ = [
    "MIB",
    "DoesNotFitError",
    "PoolPlan",
    "StrategyChoice",
    "resolve_strategy",
    "size_pools",
]

MIB = 1 << 20

# SGLang constants (mem_cache/kv_cache_configurator.py, mem_cache/allocation_sizing.py;
# docs/reference/sglang.md §2.3); the slots a request reserves are planner.strategy's
STATE_PADDING_SLOTS = 1  # MambaPool allocates size + 1 (memory_pool.py) and the sizing budgets it
AUTO_MAX_RUNNING_MIN = 2048
AUTO_MAX_RUNNING_MAX = 4096
AUTO_MAX_RUNNING_PER_CONTEXT = 512
MULTIMODAL_RESERVE_MIB = 100  # SGLANG_VLM_CACHE_SIZE_MB default, taken from the KV budget


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The pools of one GPU (one TP rank) of one server, as SGLang would size them."""

    gpu_memory_gib: float
    mem_fraction_static: float
    mem_fraction_auto: bool
    available_gib: float  # free when SGLang measures, before weights
    weights_gib: float
    rest_gib: float  # for state + KV (after the multimodal reserve)
    weight_dtype: WeightDtype
    kv_dtype: KvDtype
    ssm_dtype: StateDtype
    kv_bytes_per_token: int
    state_bytes_per_slot: int
    mamba_slots: int
    mamba_slots_source: str
    state_gib: float  # the slots plus the pool's padding slot
    kv_gib: float
    kv_tokens: int
    strategy: StrategyChoice
    max_running: int
    max_running_source: str
    context_length: int
    headroom_gib: float  # outside the static pools: activations, CUDA graphs, request table
    request_table_gib: float
    reserve_gib: float = 0.0  # SGLang's own estimate of what must stay outside the pools (reserved_mib)
    page_size: int = 1
    vlm_factor: float = 1.0  # SGLang's multimodal factor on the automatic fraction (1 when not applied)
    multimodal_reserve_gib: float = 0.0
    sglang_version: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def slots_per_request(self) -> int:
        return self.strategy.slots_per_request

    @property
    def state_slot_mib(self) -> float:
        return self.state_bytes_per_slot / MIB


def _resolved_dtypes(model: ModelSpec, flags: EngineFlags) -> tuple[WeightDtype, KvDtype, StateDtype]:
    weight: WeightDtype = flags.weight_dtype or model.weight_dtype
    kv: KvDtype = flags.kv_cache_dtype or "bf16"
    ssm: StateDtype = flags.mamba_ssm_dtype or model.ssm_dtype
    return weight, kv, ssm


@dataclass(frozen=True, slots=True)
class _Fraction:
    value: float
    auto: bool
    vlm_factor: float


def _mem_fraction(model: ModelSpec, gpu: GpuSpec, flags: EngineFlags) -> _Fraction:
    if flags.mem_fraction_static is not None:
        return _Fraction(float(flags.mem_fraction_static), False, 1.0)
    factor = vlm_mem_fraction_factor(model)
    return _Fraction(auto_mem_fraction_static(gpu.memory_mib, flags, model), True, factor)


def _budget_notes(model: ModelSpec, flags: EngineFlags, mfs: _Fraction) -> list[str]:
    notes = []
    if mfs.auto and mfs.vlm_factor != 1.0:
        notes.append(
            f"SGLang scales the automatic --mem-fraction-static by {mfs.vlm_factor:.4f} for this multimodal model "
            "(adjust_mem_fraction_for_vlm); a text-only job can set --mem-fraction-static itself"
        )
    if model.is_multimodal:
        notes.append(
            f"{MULTIMODAL_RESERVE_MIB} MiB of the KV budget is kept for multimodal caches (SGLANG_VLM_CACHE_SIZE_MB)"
        )
    if flags.speculative_algorithm:
        notes.append("speculative decoding is not modeled: pools and speeds assume plain decoding")
    return notes


def _page_size(strategy: StrategyChoice, flags: EngineFlags) -> int:
    """The KV page: the flag (default 1); ``no_buffer`` with the radix cache runs with page 1."""
    if strategy.strategy == "no_buffer":
        return 1
    return flags.page_size or 1


def size_pools(
    model: ModelSpec, gpu: GpuSpec, flags: EngineFlags, *, cuda_context_gib: float, sglang_version: str | None
) -> PoolPlan:
    """Size SGLang's pools on one GPU for a server of ``sglang_version``; DoesNotFitError when they do not fit."""
    tp = flags.tp_size
    weight_dtype, kv_dtype, ssm_dtype = _resolved_dtypes(model, flags)
    strategy = resolve_strategy(model, flags, sglang_version)
    mfs = _mem_fraction(model, gpu, flags)
    notes = [*strategy.notes, *_budget_notes(model, flags, mfs)]
    available = gpu.memory_gib - cuda_context_gib
    weights = weight_bytes(model, weight_dtype).resident / tp / GIB
    mm_reserve = MULTIMODAL_RESERVE_MIB / 1024 if model.is_multimodal else 0.0
    rest = _rest_gib(model, gpu, available, mfs.value, weights, mm_reserve, weight_dtype)
    rest_bytes = int(rest * GIB)
    kv_cell = kv_bytes_per_token(model, kv_dtype, tp)
    slot = state_bytes_per_slot(model, ssm_dtype, flags.mamba_conv_dtype, tp)
    slots, slots_source = _state_slots(model, flags, rest_bytes, slot)
    state_bytes = (slots + STATE_PADDING_SLOTS) * slot if model.is_hybrid else 0
    kv_bytes = rest_bytes - state_bytes
    page = _page_size(strategy, flags)
    tokens = _kv_tokens(flags, kv_bytes, kv_cell, page)
    _pools_fit(model, gpu, slots, slot, state_bytes, tokens, rest)
    context = flags.context_length or model.context_length
    max_running, source = _max_running(flags, tokens, context, slots, strategy.slots_per_request, model.is_hybrid)
    headroom = gpu.memory_gib * (1 - mfs.value)
    reserve = reserved_mib(gpu.memory_mib, flags, model) / 1024
    notes += _headroom_notes(mfs, headroom, reserve)
    return PoolPlan(
        gpu_memory_gib=gpu.memory_gib,
        mem_fraction_static=mfs.value,
        mem_fraction_auto=mfs.auto,
        available_gib=available,
        weights_gib=weights,
        rest_gib=rest,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        ssm_dtype=ssm_dtype,
        kv_bytes_per_token=kv_cell,
        state_bytes_per_slot=slot,
        mamba_slots=slots,
        mamba_slots_source=slots_source,
        state_gib=state_bytes / GIB,
        kv_gib=kv_bytes / GIB,
        kv_tokens=int(tokens),
        strategy=strategy,
        max_running=max_running,
        max_running_source=source,
        context_length=context,
        headroom_gib=headroom,
        request_table_gib=(max_running + 1) * (context + 4) * 4 / GIB,
        reserve_gib=reserve,
        page_size=page,
        vlm_factor=mfs.vlm_factor,
        multimodal_reserve_gib=mm_reserve,
        sglang_version=sglang_version,
        notes=tuple(notes),
    )


def _pools_fit(
    model: ModelSpec, gpu: GpuSpec, slots: int, slot: int, state_bytes: int, tokens: int, rest: float
) -> None:
    """DoesNotFitError unless the ``rest`` GiB after the weights hold a hybrid's state slot and a KV token."""
    if model.is_hybrid and slots <= 0:
        raise DoesNotFitError(
            f"not enough GPU memory for the {model.name} state cache ({slot / MIB:.1f} MiB a slot, "
            f"{rest:.1f} GiB left after weights); raise --mem-fraction-static or use bf16 state "
            "(--mamba-ssm-dtype bfloat16)"
        )
    if tokens <= 0:
        raise DoesNotFitError(
            f"no room left for KV cache on {gpu.name}: {slots} state slots take "
            f"{state_bytes / GIB:.1f} of {rest:.1f} GiB; lower --max-running-requests / "
            "--max-mamba-cache-size or raise --mem-fraction-static"
        )


def _rest_gib(
    model: ModelSpec, gpu: GpuSpec, available: float, mfs: float, weights: float, mm_reserve: float, weight_dtype: str
) -> float:
    """What the static pools get for state and KV: the static share less the weights and the multimodal reserve."""
    rest = available * mfs - weights - mm_reserve
    if rest <= 0:
        raise DoesNotFitError(
            f"{model.name} weights ({weights:.1f} GiB per GPU, {weight_dtype}) leave nothing for KV/state on "
            f"{gpu.name} at --mem-fraction-static {mfs:g}; use more GPUs per server (--tp-size), "
            "fp8/fp4 weights, or a larger GPU"
        )
    return rest


def _kv_tokens(flags: EngineFlags, kv_bytes: int, kv_cell: int, page: int) -> int:
    """KV tokens in ``kv_bytes``, capped by ``--max-total-tokens`` and rounded down to the page."""
    tokens = max(0, kv_bytes) // kv_cell
    if flags.max_total_tokens is not None:
        tokens = min(tokens, flags.max_total_tokens)
    return tokens // page * page


def _headroom_notes(mfs: _Fraction, headroom: float, need: float) -> list[str]:
    """A hand-set fraction that leaves less outside the pools than SGLang's own reserve estimate risks prefill OOM."""
    if mfs.auto or headroom >= need:
        return []
    return [
        f"{headroom:.1f} GiB outside the pools is below SGLang's own reserve estimate ({need:.1f} GiB): "
        "risk of out-of-memory in prefill; lower --chunked-prefill-size or --mem-fraction-static"
    ]


def _state_slots(model: ModelSpec, flags: EngineFlags, rest_bytes: int, slot: int) -> tuple[int, str]:
    """``_handle_max_mamba_cache``: the number of state slots and which rule chose it. The ratio rule leaves
    room for the pool's padding slot: ``floor((budget - slot) / slot)``."""
    if not model.is_hybrid:
        return 0, "n/a"
    if flags.max_mamba_cache_size is not None:
        return flags.max_mamba_cache_size, "--max-mamba-cache-size"
    if flags.disable_radix_cache and flags.max_running_requests is not None:
        return max(1, flags.max_running_requests), "--max-running-requests (radix cache off)"
    r = flags.mamba_full_memory_ratio
    budget = int(rest_bytes * r / (1 + r))
    return (budget - STATE_PADDING_SLOTS * slot) // slot, f"ratio {r:g} (--mamba-full-memory-ratio)"


def _max_running(
    flags: EngineFlags, tokens: int, context: int, slots: int, per_request: int, hybrid: bool
) -> tuple[int, str]:
    """``resolve_max_num_reqs``: the max running requests and what bound it. With ``--max-running-requests`` the
    flag is cut to half the KV tokens; without it SGLang's estimate (KV tokens / context x 512, within
    2048-4096) is, too. Hybrids then allow at most ``slots // S``; DoesNotFitError when that leaves none."""
    user = flags.max_running_requests
    if user is None:
        estimate = int(tokens / context * AUTO_MAX_RUNNING_PER_CONTEXT)
        pool = min(max(estimate, AUTO_MAX_RUNNING_MIN), AUTO_MAX_RUNNING_MAX)
        source = "SGLang auto (KV tokens / context length)"
    else:
        pool, source = max(1, user), "--max-running-requests"
    if tokens // 2 < pool:
        pool, source = tokens // 2, "KV tokens // 2"
    if hybrid and per_request and slots // per_request < pool:
        pool, source = slots // per_request, f"state slots // {per_request}"
    if pool <= 0:
        raise DoesNotFitError(
            f"{slots} state slots // {per_request} slots per request leaves no room for a running "
            "request; raise --mem-fraction-static, use bf16 state, or disable the radix cache"
        )
    return pool, source
