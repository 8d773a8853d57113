"""What the twin reports of itself: SGLang's ``/server_info`` arguments and computed state for its pools, its own
account of what it simulates, and SGLang 0.5.23's pool allocation log lines (:class:`~tokenmill.sim.twin.TwinStepModel`
holds the pools and the timing; this module only says them)."""

from __future__ import annotations

from typing import Any

from tokenmill.planner import command_line
from tokenmill.planner.hardware import GIB
from tokenmill.planner.models import state_bytes_split
from tokenmill.planner.reserve import auto_chunked_prefill_size
from tokenmill.sim.twin import TwinStepModel

__all__ = ["MAX_PREFILL_TOKENS", "computed_state", "describe", "server_args", "startup_lines"]

MAX_PREFILL_TOKENS = 16384  # SGLang's --max-prefill-tokens default
_TORCH_KV_DTYPES = {"bf16": "torch.bfloat16", "fp8": "torch.float8_e4m3fn"}
# planner dtype names -> SGLang's flag values, for /server_info
_SSM_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_KV_DTYPE_NAMES = {"fp8": "fp8_e4m3", "bf16": "bfloat16"}
_QUANTIZATION_NAMES = {"fp8": "fp8", "fp4": "modelopt_fp4"}


def server_args(twin: TwinStepModel) -> dict[str, Any]:
    """The top level of SGLang's ``/server_info``: ``ServerArgs`` as the launcher resolved them. The flags stay as
    given (``None`` where SGLang decides: ``max_running_requests``, ``max_mamba_cache_size``, ``max_total_tokens``,
    ``context_length``); the strategy, the overlap switch and the memory fraction are resolved, as SGLang's argument
    post-processing resolves them."""
    cap = twin.capacity
    pools, flags = cap.pools, cap.flags
    hybrid_radix = cap.model.is_hybrid and pools.strategy.radix_cache
    return {
        "tp_size": flags.tp_size,
        "dp_size": flags.dp_size,
        "mem_fraction_static": pools.mem_fraction_static,
        "max_running_requests": flags.max_running_requests,
        "max_total_tokens": flags.max_total_tokens,
        "max_mamba_cache_size": flags.max_mamba_cache_size,
        "context_length": flags.context_length,
        "mamba_radix_cache_strategy": pools.strategy.strategy if hybrid_radix else flags.mamba_strategy,
        "uses_mamba_radix_cache": hybrid_radix,
        "mamba_full_memory_ratio": flags.mamba_full_memory_ratio,
        "mamba_ssm_dtype": _SSM_DTYPE_NAMES.get(flags.mamba_ssm_dtype or ""),
        "disable_radix_cache": flags.disable_radix_cache,
        "disable_overlap_schedule": not pools.strategy.overlap,
        "page_size": flags.page_size or 1,
        "chunked_prefill_size": flags.chunked_prefill_size or auto_chunked_prefill_size(cap.gpu.memory_mib),
        "enable_mixed_chunk": twin.mixed_chunk,
        "cuda_graph_max_bs_decode": twin.cuda_graph_max_bs,
        "kv_cache_dtype": _KV_DTYPE_NAMES.get(flags.kv_cache_dtype or "", "auto"),
        "quantization": _QUANTIZATION_NAMES.get(flags.weight_dtype or ""),
        "schedule_conservativeness": twin.conservativeness,
    }


def computed_state(twin: TwinStepModel) -> dict[str, Any]:
    """What the scheduler computed, as ``internal_states`` shows it beside the arguments."""
    return {
        "max_mamba_cache_size": twin.mamba_slots or None,
        "effective_max_running_requests_per_dp": twin.max_running_requests,
    }


def describe(twin: TwinStepModel) -> dict[str, Any]:
    """The twin's own account: what it simulates and every pool number with its source."""
    cap = twin.capacity
    pools = cap.pools
    return {
        "model": cap.model.name,
        "gpu": cap.gpu.key,
        "flags": command_line(cap.flags),
        "unmodeled_flags": list(twin.unmodeled_flags),
        "strategy": pools.strategy.strategy,
        "overlap_schedule": pools.strategy.overlap,
        "slots_per_request": pools.slots_per_request,
        "slots_held_per_request": twin.held_slots,
        "mamba_slots": pools.mamba_slots,
        "mamba_slots_source": pools.mamba_slots_source,
        "kv_tokens": pools.kv_tokens,
        "max_running": pools.max_running,
        "max_running_source": pools.max_running_source,
        "kv_bytes_per_token": pools.kv_bytes_per_token,
        "state_bytes_per_slot": pools.state_bytes_per_slot,
        "mem_fraction_static": pools.mem_fraction_static,
        "eta_bw": cap.roofline.eta_bw,
        "fault_decode_slowdown": twin.slowdown,
        "notes": list(pools.notes),
    }


def startup_lines(twin: TwinStepModel) -> list[str]:
    """SGLang 0.5.23's pool allocation log lines for these pools, in its formats (what docs/planner.md asks users to
    compare with a real server's log)."""
    cap = twin.capacity
    pools, flags = cap.pools, cap.flags
    lines = []
    if pools.mamba_slots:
        conv, ssm = state_bytes_split(cap.model, pools.ssm_dtype, flags.mamba_conv_dtype, flags.tp_size)
        lines.append(
            f"Mamba Cache is allocated. max_mamba_cache_size: {pools.mamba_slots}, "
            f"conv_state size: {pools.mamba_slots * conv / GIB:.2f}GB, "
            f"ssm_state size: {pools.mamba_slots * ssm / GIB:.2f}GB "
        )
    half = pools.kv_tokens * pools.kv_bytes_per_token / 2 / GIB
    dtype = _TORCH_KV_DTYPES.get(pools.kv_dtype, "torch.bfloat16")
    lines.append(
        f"KV Cache is allocated. dtype: {dtype}, #tokens: {pools.kv_tokens}, K size: {half:.2f} GB, "
        f"V size: {half:.2f} GB"
    )
    chunk = flags.chunked_prefill_size or auto_chunked_prefill_size(cap.gpu.memory_mib)
    available = pools.available_gib * (1 - pools.mem_fraction_static)  # what the static pools leave
    lines.append(
        f"max_total_num_tokens={pools.kv_tokens}, chunked_prefill_size={chunk}, "
        f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={pools.max_running}, "
        f"context_len={pools.context_length}, available_gpu_mem={max(0.0, available):.2f} GB"
    )
    return lines
