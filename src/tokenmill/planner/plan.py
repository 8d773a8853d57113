"""Plans: where a fleet of SGLang servers settles for a workload, how fast it goes, and what to change.

:func:`plan` finds the steady-state operating point of one replica (running requests = the tightest of
max-running, the KV pool and the prompt count), its decode rate with prefill dilution, the fleet rate and
the ETA; :func:`compare` puts it beside the same plan on another GPU. The what-if rows that re-plan it over the
flags are :mod:`tokenmill.planner.whatif`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.config import PlannerSpec
from tokenmill.errors import ConfigError, DoesNotFitError
from tokenmill.planner.admission import held_context as admission_held_context
from tokenmill.planner.admission import schedule_conservativeness, steady_running
from tokenmill.planner.capacity import ServerCapacity, build_capacity
from tokenmill.planner.flags import EngineFlags
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.models import ModelSpec
from tokenmill.planner.roofline import StepBreakdown, asymptotic_tok_s, diluted_output_rate, saturation_points
from tokenmill.planner.workload import TrainCut, Workload, train_cut

__all__ = [
    "Comparison",
    "CurvePoint",
    "PlanResult",
    "TrainCut",
    "Workload",
    "compare",
    "kv_bound_running",
    "operating_point",
    "plan",
    "replicas_for",
    "train_cut",
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
