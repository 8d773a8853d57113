"""The memory SGLang keeps outside its static pools and the ``--mem-fraction-static`` it picks itself from it.

CUDA graphs, activations, the multimodal factor (SGLang 0.5.23, ``arg_groups/memory_hook.py``:
``handle_gpu_memory_settings``, ``reserve_for_graph_mb``, ``adjust_mem_fraction_for_vlm``): step 1 of
:mod:`tokenmill.planner.memory`'s sizing.
"""

from __future__ import annotations

from tokenmill.planner.flags import EngineFlags
from tokenmill.planner.models import ModelSpec

# SGLang constants (arg_groups/memory_hook.py)
LARGEST_AUTO_CUDA_GRAPH_BS = 512  # the largest decode --cuda-graph-max-bs SGLang picks itself
PREFILL_GRAPH_MIB_PER_SIZE = 8  # reserve_for_graph_mb: non-torch memory per captured prefill size
VLM_BASE_FACTOR = 0.95  # adjust_mem_fraction_for_vlm: the factor for a ViT-L/14-sized tower
VLM_BASELINE_LAYERS = 24  # ViT-L/14; also SGLang's fallback when the vision config has no num_hidden_layers
VLM_BASELINE_HIDDEN = 1024  # ViT-L/14; also the fallback hidden size
VLM_SENSITIVITY = 0.1  # 10 % per doubling of the tower's layers x hidden^2
VLM_ADJUSTMENT_RANGE = (0.8, 1.05)


def auto_chunked_prefill_size(gpu_mib: int) -> int:
    """SGLang's default --chunked-prefill-size by GPU memory (0.5.23 ``handle_gpu_memory_settings``)."""
    gib = gpu_mib / 1024
    if gib < 20:
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


def auto_cuda_graph_max_bs(gpu_mib: int, tp: int) -> int:
    """SGLang's default decode --cuda-graph-max-bs by GPU memory and TP (0.5.23 ``handle_gpu_memory_settings``)."""
    gib = gpu_mib / 1024
    small_tp = tp < 4
    if gib < 20:
        return 8
    if gib < 35:
        return 48 if small_tp else 160
    if gib < 60:
        return 32 if small_tp else 160
    if gib < 160:
        return 256 if small_tp else LARGEST_AUTO_CUDA_GRAPH_BS
    return LARGEST_AUTO_CUDA_GRAPH_BS


def decode_graph_max_bs(gpu_mib: int, flags: EngineFlags) -> int:
    """The decode CUDA graph's largest batch: the flag, or the default cut to ``--max-running-requests``."""
    if flags.cuda_graph_max_bs is not None:
        return flags.cuda_graph_max_bs
    default = auto_cuda_graph_max_bs(gpu_mib, flags.tp_size)
    if flags.max_running_requests is not None:
        return min(default, flags.max_running_requests)
    return default


def prefill_graph_sizes(max_tokens: int) -> int:
    """How many token counts SGLang captures prefill CUDA graphs for, up to ``max_tokens``
    (``generate_prefill_cuda_graph_batch_sizes``: 4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1024 by 64,
    1280..4096 by 256, then by 512)."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256), (4608, max_tokens, 512))
    return sum(len(range(lo, min(hi, max_tokens) + 1, step)) for lo, hi, step in steps)


def _chunked_prefill(gpu_mib: int, flags: EngineFlags) -> int:
    return flags.chunked_prefill_size or auto_chunked_prefill_size(gpu_mib)


def graph_reserve_mib(gpu_mib: int, flags: EngineFlags, model: ModelSpec | None = None) -> float:
    """CUDA-graph memory SGLang keeps outside the pools (``reserve_for_graph_mb``): 2 MiB per decode batch size
    up to the decode graph's largest batch, 8 MiB per captured prefill size. The prefill graph is on by default
    on CUDA; multimodal architectures outside SGLang's allow list run prefill without it."""
    if flags.disable_cuda_graph:
        return 0.0
    reserve = 0.0 if flags.disable_decode_graph else 2.0 * decode_graph_max_bs(gpu_mib, flags)
    prefill_graph = not flags.disable_prefill_graph and (model is None or model.keeps_prefill_graph)
    chunk = _chunked_prefill(gpu_mib, flags)
    if prefill_graph and chunk > 0:
        tokens = chunk if flags.max_total_tokens is None else min(chunk, flags.max_total_tokens)
        reserve += PREFILL_GRAPH_MIB_PER_SIZE * prefill_graph_sizes(tokens)
    return reserve


def reserved_mib(gpu_mib: int, flags: EngineFlags, model: ModelSpec | None = None) -> float:
    """Memory SGLang keeps outside the static pools when it picks --mem-fraction-static itself."""
    chunk = _chunked_prefill(gpu_mib, flags)
    activation_tokens = max(chunk, 2048) if chunk > 0 else max(16384, 2048)  # --max-prefill-tokens 16384
    reserved = 512 + 1.5 * activation_tokens + flags.tp_size / 8 * 1024 + graph_reserve_mib(gpu_mib, flags, model)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def vlm_mem_fraction_factor(model: ModelSpec | None) -> float:
    """SGLang's automatic-fraction factor for a multimodal model (``adjust_mem_fraction_for_vlm``): 0.95 times
    ``clamp(1 - 0.1*(L*H^2/(24*1024^2) - 1), 0.8, 1.05)`` from the vision config's ``num_hidden_layers`` (24 when
    the key is absent) and ``hidden_size`` (1024 when absent); 1 for text-only models or no vision config."""
    if model is None or not model.is_multimodal or model.vision is None:
        return 1.0
    layers = model.vision.num_hidden_layers or VLM_BASELINE_LAYERS
    hidden = model.vision.hidden_size or VLM_BASELINE_HIDDEN
    ratio = layers * hidden**2 / (VLM_BASELINE_LAYERS * VLM_BASELINE_HIDDEN**2)
    low, high = VLM_ADJUSTMENT_RANGE
    return VLM_BASE_FACTOR * max(low, min(high, 1.0 - VLM_SENSITIVITY * (ratio - 1.0)))


def auto_mem_fraction_static(gpu_mib: int, flags: EngineFlags, model: ModelSpec | None = None) -> float:
    """SGLang's automatic --mem-fraction-static (``handle_gpu_memory_settings``); ``model`` None: a text-only
    model that keeps the prefill CUDA graph."""
    base = round((gpu_mib - reserved_mib(gpu_mib, flags, model)) / gpu_mib, 3)
    return base * vlm_mem_fraction_factor(model)
