"""SGLang's memory pools for one GPU of one server: weights, recurrent-state slots, KV tokens, max running.

This mirrors SGLang's own sizing (sglang.md §1.3 and §2.3; hardware.md §3.4), step by step:

1. ``--mem-fraction-static``: the flag, or SGLang's automatic value ``round((M - reserved)/M, 3)`` with
   ``reserved = 512 + 1.5*max(chunked_prefill, 2048) + 2*cuda_graph_max_bs + tp/8*1024`` MiB, at least
   10 GiB on GPUs over 60 GiB.
2. ``rest = available_before_weights * mfs - weights`` (``profile_max_num_token``: available after weights
   minus available before times ``1 - mfs``).
3. State slots (``handle_max_mamba_cache``): ``--max-mamba-cache-size``; else ``--max-running-requests``
   when the radix cache is disabled; else ``floor(rest * r/(1+r) / slot)`` with
   ``r = --mamba-full-memory-ratio``.
4. KV tokens: ``floor((rest - slots*slot) / kv_bytes_per_token)``, rounded down to the page size and capped
   by ``--max-total-tokens``.
5. Max running: ``min(flag or clamp(tokens/context*512, 2048, 4096), slots // S)``, then
   ``min(flag or tokens//2, that)``; S is the number of slots SGLang reserves per running request.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.errors import ConfigError
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

MIB = 1 << 20

# SGLang constants (model_runner_kv_cache_mixin.py / kv_cache_configurator.py; sglang.md §2.3)
RADIX_BASE_SLOTS = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
PING_PONG_SLOTS_OVERLAP = 2  # extra_buffer with the overlap scheduler
PING_PONG_SLOTS_NO_OVERLAP = 1  # extra_buffer without overlap (or with speculative decoding)
PING_PONG_SLOTS_LAZY = 1  # extra_buffer_lazy: the second buffer is taken on demand
AUTO_MAX_RUNNING_MIN = 2048
AUTO_MAX_RUNNING_MAX = 4096
AUTO_MAX_RUNNING_PER_CONTEXT = 512
LARGEST_AUTO_CUDA_GRAPH_BS = 512  # the largest --cuda-graph-max-bs SGLang picks itself


class DoesNotFitError(ConfigError):
    """The model and its pools do not fit on the GPU with these flags."""


@dataclass(frozen=True, slots=True)
class StrategyChoice:
    """How SGLang will run the recurrent-state radix cache, and the slots it reserves per request (S)."""

    strategy: str  # no_buffer | extra_buffer | extra_buffer_lazy | radix off | n/a
    radix_cache: bool
    overlap: bool
    slots_per_request: int  # S; 0 for models without recurrent state
    notes: tuple[str, ...] = ()


def resolve_strategy(model: ModelSpec, flags: EngineFlags, auto_strategy: str) -> StrategyChoice:
    """Resolve ``auto``, the overlap scheduler and S (``_calculate_mamba_ratio``; sglang.md §1.2, §2.3)."""
    radix = not flags.disable_radix_cache
    overlap = not flags.disable_overlap_schedule
    notes: list[str] = []
    if not model.is_hybrid:
        return StrategyChoice("n/a", radix, overlap, 0)
    if not radix:
        if flags.mamba_strategy in ("extra_buffer", "extra_buffer_lazy"):
            notes.append(
                f"{flags.mamba_strategy} with --disable-radix-cache: SGLang up to v0.5.10 refuses this "
                "combination (use no_buffer); later builds ignore the strategy"
            )
        return StrategyChoice("radix off", False, overlap, 1, tuple(notes))
    strategy = flags.mamba_strategy
    if strategy == "auto":
        strategy = "extra_buffer" if auto_strategy == "extra_buffer" and model.supports_extra_buffer else "no_buffer"
        if auto_strategy == "extra_buffer" and not overlap:
            strategy = "no_buffer"  # later builds pick extra_buffer only when overlap is wanted
        notes.append(f"--mamba-scheduler-strategy auto resolved to {strategy}")
    if strategy in ("extra_buffer", "extra_buffer_lazy") and not model.supports_extra_buffer:
        raise ConfigError(f"{model.name} ({model.model_type}) does not support {strategy}; use no_buffer")
    base = RADIX_BASE_SLOTS
    if strategy == "no_buffer":
        if overlap:
            notes.append("no_buffer with the radix cache turns the overlap scheduler off")
        return StrategyChoice("no_buffer", True, False, base, tuple(notes))
    if flags.skip_decode_lock:
        base -= 1
    if flags.speculative_algorithm:
        extra = PING_PONG_SLOTS_NO_OVERLAP
    elif strategy == "extra_buffer_lazy":
        extra = PING_PONG_SLOTS_LAZY
        notes.append("extra_buffer_lazy needs an SGLang build with PR #27118")
    else:
        extra = PING_PONG_SLOTS_OVERLAP if overlap else PING_PONG_SLOTS_NO_OVERLAP
    return StrategyChoice(strategy, True, overlap, base + extra, tuple(notes))


def auto_chunked_prefill_size(gpu_mib: int) -> int:
    """SGLang's default --chunked-prefill-size by GPU memory (sglang.md §1.3)."""
    gib = gpu_mib / 1024
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


def auto_cuda_graph_max_bs(gpu_mib: int, tp: int) -> int:
    """SGLang's default --cuda-graph-max-bs by GPU memory and TP (sglang.md §1.3)."""
    gib = gpu_mib / 1024
    small_tp = tp < 4
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if small_tp else 80
    if gib < 60:
        return 32 if small_tp else 160
    if gib < 160:
        return 256 if small_tp else LARGEST_AUTO_CUDA_GRAPH_BS
    return LARGEST_AUTO_CUDA_GRAPH_BS


def reserved_mib(gpu_mib: int, flags: EngineFlags) -> float:
    """Memory SGLang keeps outside the static pools when it picks --mem-fraction-static itself."""
    chunk = flags.chunked_prefill_size or auto_chunked_prefill_size(gpu_mib)
    activation_tokens = max(chunk, 2048) if chunk > 0 else max(16384, 2048)
    graph_bs = flags.cuda_graph_max_bs or auto_cuda_graph_max_bs(gpu_mib, flags.tp_size)
    reserved = 512 + 1.5 * activation_tokens + 2 * graph_bs + flags.tp_size / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def auto_mem_fraction_static(gpu_mib: int, flags: EngineFlags) -> float:
    """SGLang's automatic --mem-fraction-static (``_handle_gpu_memory_settings``)."""
    return round((gpu_mib - reserved_mib(gpu_mib, flags)) / gpu_mib, 3)


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The pools of one GPU (one TP rank) of one server, as SGLang would size them."""

    gpu_memory_gib: float
    mem_fraction_static: float
    mem_fraction_auto: bool
    available_gib: float  # free when SGLang measures, before weights
    weights_gib: float
    rest_gib: float  # for state + KV
    weight_dtype: WeightDtype
    kv_dtype: KvDtype
    ssm_dtype: StateDtype
    kv_bytes_per_token: int
    state_bytes_per_slot: int
    mamba_slots: int
    mamba_slots_source: str
    state_gib: float
    kv_gib: float
    kv_tokens: int
    strategy: StrategyChoice
    max_running: int
    max_running_source: str
    context_length: int
    headroom_gib: float  # outside the static pools: activations, CUDA graphs, request table
    request_table_gib: float
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


def size_pools(
    model: ModelSpec, gpu: GpuSpec, flags: EngineFlags, *, cuda_context_gib: float, auto_strategy: str
) -> PoolPlan:
    """Size SGLang's pools on one GPU; DoesNotFitError when weights or pools do not fit."""
    tp = flags.tp_size
    weight_dtype, kv_dtype, ssm_dtype = _resolved_dtypes(model, flags)
    strategy = resolve_strategy(model, flags, auto_strategy)
    notes = list(strategy.notes)
    mfs_auto = flags.mem_fraction_static is None
    mfs = auto_mem_fraction_static(gpu.memory_mib, flags) if mfs_auto else float(flags.mem_fraction_static or 0)
    if mfs_auto and model.vision_params:
        notes.append("SGLang scales the automatic --mem-fraction-static by 0.8-1.0 for multimodal models (not modeled)")
    if flags.speculative_algorithm:
        notes.append("speculative decoding is not modeled: pools and speeds assume plain decoding")
    available = gpu.memory_gib - cuda_context_gib
    weights = weight_bytes(model, weight_dtype).resident / tp / GIB
    rest = available * mfs - weights
    if rest <= 0:
        raise DoesNotFitError(
            f"{model.name} weights ({weights:.1f} GiB per GPU, {weight_dtype}) leave nothing for KV/state on "
            f"{gpu.name} at --mem-fraction-static {mfs:g}; use more GPUs per server (--tp-size), "
            "fp8/fp4 weights, or a larger GPU"
        )
    rest_bytes = int(rest * GIB)
    kv_cell = kv_bytes_per_token(model, kv_dtype, tp)
    slot = state_bytes_per_slot(model, ssm_dtype, flags.mamba_conv_dtype, tp)
    slots, slots_source = _state_slots(model, flags, rest_bytes, slot)
    if model.is_hybrid and slots <= 0:
        raise DoesNotFitError(
            f"not enough GPU memory for the {model.name} state cache ({slot / MIB:.1f} MiB a slot, "
            f"{rest:.1f} GiB left after weights); raise --mem-fraction-static or use bf16 state "
            "(--mamba-ssm-dtype bfloat16)"
        )
    kv_bytes = rest_bytes - slots * slot
    page = flags.page_size or 1
    tokens = max(0, kv_bytes) // kv_cell // page * page
    if flags.max_total_tokens is not None:
        tokens = min(tokens, flags.max_total_tokens)
    if tokens <= 0:
        raise DoesNotFitError(
            f"no room left for KV cache on {gpu.name}: {slots} state slots take "
            f"{slots * slot / GIB:.1f} of {rest:.1f} GiB; lower --max-running-requests / "
            "--max-mamba-cache-size or raise --mem-fraction-static"
        )
    context = flags.context_length or model.context_length
    max_running, source = _max_running(flags, tokens, context, slots, strategy.slots_per_request, model.is_hybrid)
    if max_running <= 0:
        raise DoesNotFitError(
            f"{slots} state slots // {strategy.slots_per_request} slots per request leaves no room for a running "
            "request; raise --mem-fraction-static, use bf16 state, or disable the radix cache"
        )
    request_table = (max_running + 1) * (context + 4) * 4 / GIB
    headroom = gpu.memory_gib * (1 - mfs)
    need = reserved_mib(gpu.memory_mib, flags) / 1024
    if not mfs_auto and headroom < need:
        notes.append(
            f"{headroom:.1f} GiB outside the pools is below SGLang's own reserve estimate ({need:.1f} GiB): "
            "risk of out-of-memory in prefill; lower --chunked-prefill-size or --mem-fraction-static"
        )
    return PoolPlan(
        gpu_memory_gib=gpu.memory_gib,
        mem_fraction_static=mfs,
        mem_fraction_auto=mfs_auto,
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
        state_gib=slots * slot / GIB,
        kv_gib=kv_bytes / GIB,
        kv_tokens=int(tokens),
        strategy=strategy,
        max_running=max_running,
        max_running_source=source,
        context_length=context,
        headroom_gib=headroom,
        request_table_gib=request_table,
        notes=tuple(notes),
    )


def _state_slots(model: ModelSpec, flags: EngineFlags, rest_bytes: int, slot: int) -> tuple[int, str]:
    """``handle_max_mamba_cache``: the number of state slots and which rule chose it."""
    if not model.is_hybrid:
        return 0, "n/a"
    if flags.max_mamba_cache_size is not None:
        return flags.max_mamba_cache_size, "--max-mamba-cache-size"
    if flags.disable_radix_cache and flags.max_running_requests is not None:
        return flags.max_running_requests, "--max-running-requests (radix cache off)"
    r = flags.mamba_full_memory_ratio
    return int(rest_bytes * r / (1 + r)) // slot, f"ratio {r:g} (--mamba-full-memory-ratio)"


def _max_running(
    flags: EngineFlags, tokens: int, context: int, slots: int, per_request: int, hybrid: bool
) -> tuple[int, str]:
    """``init_memory`` + the TP worker's clamp: the max running requests and what bound it."""
    user = flags.max_running_requests
    if user is None:
        pool = min(
            max(int(tokens / context * AUTO_MAX_RUNNING_PER_CONTEXT), AUTO_MAX_RUNNING_MIN), AUTO_MAX_RUNNING_MAX
        )
        source = "SGLang auto (KV tokens / context length)"
    else:
        pool, source = user, "--max-running-requests"
    if hybrid and per_request and slots // per_request < pool:
        pool, source = slots // per_request, f"state slots // {per_request}"
    cap = user if user is not None else tokens // 2
    if cap < pool:
        pool, source = cap, "KV tokens // 2"
    return pool, source
