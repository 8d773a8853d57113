"""What-if plans: one model and workload re-planned over the flags that matter, ranked best first.

The axes: strategies, radix on/off with an explicit max-running, SSM dtype, weight dtype and
``--mem-fraction-static``; each row carries the exact flags to use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tokenmill.config import PlannerSpec
from tokenmill.errors import DoesNotFitError
from tokenmill.planner.capacity import build_capacity
from tokenmill.planner.flags import EngineFlags, command_line
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.models import WEIGHT_DTYPES, ModelSpec, StateDtype, WeightDtype
from tokenmill.planner.plan import PlanResult, held_context, kv_bound_running, operating_point, replicas_for
from tokenmill.planner.reserve import LARGEST_AUTO_CUDA_GRAPH_BS, decode_graph_max_bs
from tokenmill.planner.workload import Workload

__all__ = ["WhatIfRow", "best_radix_off_running", "what_if"]


@dataclass(frozen=True, slots=True)
class WhatIfRow:
    """One alternative configuration and its plan (or why it does not fit)."""

    strategy: str
    ssm_dtype: StateDtype | None
    weight_dtype: WeightDtype
    mem_fraction: float | None  # None = SGLang's automatic value
    flags: EngineFlags
    result: PlanResult | None
    error: str | None = None
    is_base: bool = False
    notes: tuple[str, ...] = field(default=())
    sglang_version: str | None = None

    @property
    def command(self) -> str:
        """The flags of this row, spelled for the SGLang release the plan is for."""
        return command_line(self.flags, self.sglang_version)

    @property
    def tok_s_per_gpu(self) -> float:
        return self.result.tok_s_per_gpu if self.result else 0.0


_STRATEGY_VARIANTS = ("no_buffer", "extra_buffer", "extra_buffer_lazy", "radix off")


def _strategy_flags(base: EngineFlags, variant: str) -> EngineFlags:
    """The flags of one strategy row, valid on every release: ``no_buffer`` carries ``--disable-overlap-schedule``
    (SGLang 0.5.14+ refuses it without), the radix-off row leaves the strategy at ``auto`` (inert without the
    radix cache; releases up to 0.5.13 refuse ``extra_buffer`` there)."""
    common = {"max_mamba_cache_size": None, "max_running_requests": base.max_running_requests}
    if variant == "radix off":
        return base.with_(mamba_strategy="auto", strategy_flag=None, disable_radix_cache=True, **common)
    if variant == "no_buffer":
        overlap_off = True
    elif variant == "extra_buffer_lazy":
        overlap_off = False
    else:
        overlap_off = base.disable_overlap_schedule
    return base.with_(mamba_strategy=variant, disable_radix_cache=False, disable_overlap_schedule=overlap_off, **common)


def best_radix_off_running(
    model: ModelSpec, gpu: GpuSpec, flags: EngineFlags, workload: Workload, replicas: int, config: PlannerSpec
) -> int:
    """The explicit --max-running-requests that fills memory exactly: N slots and N requests' KV.

    With the radix cache off SGLang allocates exactly N state slots (plus its padding slot) and gives KV the
    rest, so the KV pool holds ``(rest - (N+1)*slot)/kv`` tokens; N requests of mean context c fit when
    ``N = (rest - slot)*u / (c*kv + u*slot)`` (u = kv_target_usage). More running never lowers the roofline rate,
    so this N is the best; it is trimmed to the prompt count and checked against the real sizing and against
    admission for the workload's request kind (:func:`kv_bound_running`), stepping down to what it keeps running.
    """
    probe = build_capacity(model, gpu, flags.with_(max_running_requests=None), config)
    pools = probe.pools
    u = config.kv_target_usage
    rest_bytes = pools.rest_gib * (1 << 30) - pools.state_bytes_per_slot  # the state pool's padding slot
    context = held_context(workload, config)
    n = int(rest_bytes * u / (context * pools.kv_bytes_per_token + u * pools.state_bytes_per_slot))
    n = max(1, min(n, math.ceil(workload.prompts / replicas)))
    while n > 1:
        fits = kv_bound_running(
            build_capacity(model, gpu, flags.with_(max_running_requests=n), config), workload, config
        )
        if fits >= n:
            break
        n = max(1, min(n - 1, fits))
    return n


def what_if(
    model: ModelSpec,
    gpu: GpuSpec,
    base_flags: EngineFlags,
    workload: Workload,
    config: PlannerSpec,
    *,
    gpu_count: int = 1,
    eta: float | None = None,
) -> list[WhatIfRow]:
    """Every combination of the what-if axes, best first; rows that do not fit come last."""
    replicas = replicas_for(gpu_count, base_flags)
    base_weight: WeightDtype = base_flags.weight_dtype or model.weight_dtype
    weights = [w for w in WEIGHT_DTYPES if WEIGHT_DTYPES.index(w) >= WEIGHT_DTYPES.index(base_weight)]
    if gpu.fp4_tflops is None:
        weights = [w for w in weights if w != "fp4" or w == base_weight]
    fractions: list[float | None] = [base_flags.mem_fraction_static]
    fractions += [f for f in config.whatif_mem_fractions if f != base_flags.mem_fraction_static]
    strategies: tuple[str, ...] = _STRATEGY_VARIANTS if model.is_hybrid else ("radix on",)
    ssm_dtypes: tuple[StateDtype | None, ...] = ("fp32", "bf16") if model.is_hybrid else (None,)
    base = _base_row(model, gpu, base_flags, workload, config, replicas, eta)
    rows = [
        _row(model, gpu, base_flags, workload, config, replicas, eta, s, d, w, f)
        for s in strategies
        for d in ssm_dtypes
        for w in weights
        for f in fractions
    ]
    rows = [r for r in rows if base.result is None or _signature(r) != _signature(base)]
    rows.append(base)
    return sorted(rows, key=lambda r: (r.result is None, -r.tok_s_per_gpu, not r.is_base))


def _signature(row: WhatIfRow) -> tuple[object, ...] | None:
    """What makes two rows the same plan (the base row and its spelled-out twin)."""
    if row.result is None:
        return None
    p = row.result.capacity.pools
    return (p.strategy.strategy, p.ssm_dtype, p.weight_dtype, p.mem_fraction_static, p.max_running, p.kv_tokens)


def _base_row(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: EngineFlags,
    workload: Workload,
    config: PlannerSpec,
    replicas: int,
    eta: float | None,
) -> WhatIfRow:
    try:
        result = operating_point(build_capacity(model, gpu, flags, config, eta), workload, replicas, config)
        strategy = result.capacity.pools.strategy.strategy
        error = None
    except DoesNotFitError as exc:
        result, strategy, error = None, flags.mamba_strategy, str(exc)
    return WhatIfRow(
        strategy=strategy,
        ssm_dtype=flags.mamba_ssm_dtype or (model.ssm_dtype if model.is_hybrid else None),
        weight_dtype=flags.weight_dtype or model.weight_dtype,
        mem_fraction=flags.mem_fraction_static,
        flags=flags,
        result=result,
        error=error,
        is_base=True,
        sglang_version=config.sglang_version,
    )


def _row(
    model: ModelSpec,
    gpu: GpuSpec,
    base: EngineFlags,
    workload: Workload,
    config: PlannerSpec,
    replicas: int,
    eta: float | None,
    strategy: str,
    ssm: StateDtype | None,
    weight: WeightDtype,
    mfs: float | None,
) -> WhatIfRow:
    flags = base if strategy == "radix on" else _strategy_flags(base, strategy)
    flags = flags.with_(
        mamba_ssm_dtype=ssm if ssm != model.ssm_dtype else None,
        weight_dtype=weight if weight != model.weight_dtype else None,
        mem_fraction_static=mfs,
    )
    notes: list[str] = []
    if weight != model.weight_dtype:
        notes.append(
            "online fp8 quantization" if weight == "fp8" else "needs an NVFP4 checkpoint (e.g. a ModelOpt export)"
        )
    try:
        if strategy == "radix off":
            n = best_radix_off_running(model, gpu, flags, workload, replicas, config)
            graph_bs = decode_graph_max_bs(gpu.memory_mib, flags.with_(max_running_requests=None))
            if n > graph_bs and graph_bs < LARGEST_AUTO_CUDA_GRAPH_BS:
                # capture CUDA graphs up to N, as far as SGLang itself would go (larger decode batches run
                # without them); the bigger capture reserves a little more memory, so N is recomputed and
                # the capture trimmed to it (a smaller capture only frees memory)
                flags = flags.with_(cuda_graph_max_bs=min(n, LARGEST_AUTO_CUDA_GRAPH_BS))
                n = best_radix_off_running(model, gpu, flags, workload, replicas, config)
                graph_bs = max(graph_bs, min(n, LARGEST_AUTO_CUDA_GRAPH_BS))
                flags = flags.with_(cuda_graph_max_bs=graph_bs)
            if n > graph_bs:
                notes.append(f"decode batches over {graph_bs} run without CUDA graphs (slower; not modeled)")
            flags = flags.with_(max_running_requests=n)
        cap = build_capacity(model, gpu, flags, config, eta)
        result = operating_point(cap, workload, replicas, config)
        if strategy == "radix off" and result.binding == "max-running flag":
            # N was chosen so that N slots and N requests' KV fill the budget: memory binds, not the flag
            result = replace(result, binding="KV+state")
        notes.extend(cap.pools.notes)
        error = None
    except DoesNotFitError as exc:
        result, error = None, str(exc)
    return WhatIfRow(strategy, ssm, weight, mfs, flags, result, error, False, tuple(notes), config.sglang_version)
