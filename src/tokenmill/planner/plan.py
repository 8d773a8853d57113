"""Plans: where a fleet of SGLang servers settles for a workload, how fast it goes, and what to change.

:func:`plan` finds the steady-state operating point of one replica (running requests = the tightest of
max-running, the KV pool and the prompt count), its decode rate with prefill dilution, the fleet rate and
the ETA. :func:`what_if` re-plans over strategies, radix on/off with an explicit max-running, SSM dtype,
weight dtype and ``--mem-fraction-static`` and ranks the rows; each row carries the exact flags to use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tokenmill.config import PlannerSpec
from tokenmill.errors import ConfigError, DoesNotFitError
from tokenmill.planner.admission import held_context as admission_held_context
from tokenmill.planner.admission import schedule_conservativeness, steady_running
from tokenmill.planner.capacity import ServerCapacity, build_capacity
from tokenmill.planner.flags import EngineFlags, command_line
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.memory import LARGEST_AUTO_CUDA_GRAPH_BS, decode_graph_max_bs
from tokenmill.planner.models import WEIGHT_DTYPES, ModelSpec, StateDtype, WeightDtype
from tokenmill.planner.roofline import StepBreakdown, asymptotic_tok_s, diluted_output_rate, saturation_points
from tokenmill.planner.workload import TrainCut, Workload, train_cut

__all__ = [
    "Comparison",
    "CurvePoint",
    "PlanResult",
    "TrainCut",
    "WhatIfRow",
    "Workload",
    "best_radix_off_running",
    "compare",
    "kv_bound_running",
    "operating_point",
    "plan",
    "replicas_for",
    "train_cut",
    "what_if",
]


@dataclass(frozen=True, slots=True)
class CurvePoint:
    running: int
    tok_s_per_gpu: float
    bound: str


@dataclass(frozen=True, slots=True)
class PlanResult:
    """The operating point of one configuration on a fleet of identical replicas."""

    capacity: ServerCapacity
    workload: Workload
    replicas: int
    running: int
    binding: str
    limits: dict[str, int]
    step: StepBreakdown
    prefill_s_per_request: float
    output_tok_s: float  # one replica, with prefill dilution
    curve: tuple[CurvePoint, ...]
    ceiling_tok_s_per_gpu: float  # memory-bound asymptote as running grows without bound

    @property
    def gpus(self) -> int:
        return self.replicas * self.capacity.gpus

    @property
    def decode_tok_s(self) -> float:
        """One replica, decode only (no prefill dilution)."""
        return self.step.tokens_per_s

    @property
    def tok_s_per_gpu(self) -> float:
        return self.output_tok_s / self.capacity.gpus

    @property
    def fleet_tok_s(self) -> float:
        return self.output_tok_s * self.replicas

    @property
    def eta_s(self) -> float:
        return self.workload.output_tokens / self.fleet_tok_s if self.fleet_tok_s > 0 else math.inf

    @property
    def command(self) -> str:
        """The flags of this plan, spelled for the SGLang release it was sized for."""
        return self.capacity.command


def _binding_label(source: str) -> str:
    if source.startswith("state slots"):
        return "state slots"
    if source.startswith("KV tokens"):
        return "KV tokens // 2"
    if source.startswith("--max-running"):
        return "max-running flag"
    return "auto max-running"


def output_sigma(workload: Workload, config: PlannerSpec) -> float:
    """The spread of the answer lengths the steady state is planned with: the workload's, else the planner's
    default; none for ``ignore_eos`` answers (all run to their limit)."""
    if workload.ignore_eos:
        return 0.0
    return workload.output_sigma if workload.output_sigma is not None else config.workload_output_sigma


def held_context(workload: Workload, config: PlannerSpec) -> float:
    """Tokens a running request of ``workload`` holds on average in steady state: its prompt and what it has written,
    long answers counted for as long as they run (:func:`tokenmill.planner.admission.held_context`)."""
    sigma = output_sigma(workload, config)
    return admission_held_context(workload.input_len, workload.output_len, workload.limit, sigma)


def kv_bound_running(cap: ServerCapacity, workload: Workload, config: PlannerSpec) -> int:
    """Requests of ``workload`` the KV pool keeps running, by SGLang's admission rule for their kind
    (:func:`tokenmill.planner.admission.steady_running`, the rule the twin's scheduler and the doctor apply), with
    the running set as it is over time: long answers run longer, so they are more of it (the answers' spread,
    :func:`output_sigma`). ``ignore_eos`` requests are admitted only while every running one's prompt and whole
    clipped limit fit, so admission alone binds; ordinary ones are admitted against the settled new-token ratio, and
    SGLang retracts when the pool then runs out, so they are also held to ``kv_target_usage`` of the pool at the
    context they hold (:func:`held_context`)."""
    conservativeness, _ = schedule_conservativeness(cap.flags)
    admitted = steady_running(
        cap.kv_tokens,
        workload.input_len,
        workload.output_len,
        workload.limit,
        ignore_eos=workload.ignore_eos,
        conservativeness=conservativeness,
        sigma=output_sigma(workload, config),
    )
    if workload.ignore_eos:
        return admitted
    return min(admitted, cap.kv_bound_running(held_context(workload, config), config.kv_target_usage))


def operating_point(cap: ServerCapacity, workload: Workload, replicas: int, config: PlannerSpec) -> PlanResult:
    """Steady state of ``cap`` under ``workload`` with ``replicas`` replicas sharing the prompts."""
    kv_bound = kv_bound_running(cap, workload, config)
    limits = {
        _binding_label(cap.pools.max_running_source): cap.max_running,
        "KV cache": kv_bound,
        "prompt count": math.ceil(workload.prompts / replicas),
    }
    binding = min(limits, key=lambda k: limits[k])
    running = limits[binding]
    if running < 1:
        raise DoesNotFitError(
            f"the KV pool ({cap.kv_tokens} tokens) cannot hold one request of {workload.avg_context:.0f} tokens; "
            "shorten the requests, raise --mem-fraction-static, or use an fp8 KV cache"
        )
    st = cap.step(running, round(running * workload.avg_context))
    prefill = cap.prefill_compute_s(workload.input_len)
    output = diluted_output_rate(st.tokens_per_s, prefill, workload.output_len)
    curve = tuple(
        CurvePoint(b, (s := cap.step(b, round(b * workload.avg_context))).tokens_per_s / cap.gpus, s.bound)
        for b in saturation_points(running)
    )
    ceiling = asymptotic_tok_s(cap.cost, cap.roofline, workload.avg_context) / cap.gpus
    return PlanResult(
        capacity=cap,
        workload=workload,
        replicas=replicas,
        running=running,
        binding=binding,
        limits=limits,
        step=st,
        prefill_s_per_request=prefill,
        output_tok_s=output,
        curve=curve,
        ceiling_tok_s_per_gpu=ceiling,
    )


def replicas_for(gpu_count: int, flags: EngineFlags) -> int:
    if gpu_count < flags.tp_size:
        raise ConfigError(f"--tp-size {flags.tp_size} needs at least {flags.tp_size} GPUs; got {gpu_count}")
    return gpu_count // flags.tp_size


def plan(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: EngineFlags,
    workload: Workload,
    config: PlannerSpec,
    *,
    gpu_count: int = 1,
    eta: float | None = None,
) -> PlanResult:
    """Plan one configuration on ``gpu_count`` GPUs (``gpu_count // tp`` replicas)."""
    cap = build_capacity(model, gpu, flags, config, eta)
    return operating_point(cap, workload, replicas_for(gpu_count, flags), config)


@dataclass(frozen=True, slots=True)
class Comparison:
    """This plan's per-GPU rate as a share of the same plan on a reference GPU."""

    reference: GpuSpec
    result: PlanResult | None
    error: str | None
    percent: float | None  # planned GPU / reference GPU x 100


def compare(
    base: PlanResult, reference: GpuSpec, config: PlannerSpec, *, gpu_count: int, eta: float | None = None
) -> Comparison:
    """The same model, flags and workload on ``reference``."""
    cap = base.capacity
    try:
        ref = plan(cap.model, reference, cap.flags, base.workload, config, gpu_count=gpu_count, eta=eta)
    except DoesNotFitError as exc:
        return Comparison(reference, None, str(exc), None)
    pct = 100.0 * base.tok_s_per_gpu / ref.tok_s_per_gpu if ref.tok_s_per_gpu > 0 else None
    return Comparison(reference, ref, None, pct)


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
