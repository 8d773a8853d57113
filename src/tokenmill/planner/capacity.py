"""One SGLang server replica (a TP group) as the planner sees it: pools, limits, step times and the default η.

:func:`server_capacity` is the entry point for every user of the planner (``plan``, the doctor, the
simulated server)::

    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--mamba-radix-cache-strategy extra_buffer")
    cap.max_running, cap.kv_tokens, cap.mamba_slots            # pool capacities
    cap.kv_bytes_per_token, cap.state_bytes_per_slot           # per-request costs (one GPU)
    cap.step_time_s(running=20, total_context_tokens=30_000)   # seconds per decode step
    cap.prefill_time_s(new_tokens=2048)                        # seconds for one prefill chunk
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenmill.config import PlannerSpec
from tokenmill.planner.flags import EngineFlags, command_line, parse_flags
from tokenmill.planner.hardware import GpuCatalog, GpuSpec
from tokenmill.planner.memory import PoolPlan, size_pools
from tokenmill.planner.models import ModelSpec
from tokenmill.planner.roofline import (
    DecodeCost,
    RooflineParams,
    StepBreakdown,
    decode_cost,
    prefill_compute_s,
    prefill_time_s,
    step,
    step_time_s,
)


@dataclass(frozen=True, slots=True)
class ServerCapacity:
    """Pools and timing of one replica; step times are for the whole TP group (its GPUs run in lockstep)."""

    model: ModelSpec
    gpu: GpuSpec
    flags: EngineFlags
    pools: PoolPlan
    cost: DecodeCost
    roofline: RooflineParams

    @property
    def gpus(self) -> int:
        """GPUs in this replica (TP size)."""
        return self.flags.tp_size

    @property
    def sglang_version(self) -> str | None:
        """The SGLang release the pools were sized for (flags are rendered for it)."""
        return self.pools.sglang_version

    @property
    def command(self) -> str:
        """The flags, spelled for :attr:`sglang_version`."""
        return command_line(self.flags, self.sglang_version)

    @property
    def max_running(self) -> int:
        return self.pools.max_running

    @property
    def kv_tokens(self) -> int:
        return self.pools.kv_tokens

    @property
    def mamba_slots(self) -> int:
        return self.pools.mamba_slots

    @property
    def slots_per_request(self) -> int:
        return self.pools.slots_per_request

    @property
    def kv_bytes_per_token(self) -> int:
        return self.pools.kv_bytes_per_token

    @property
    def state_bytes_per_slot(self) -> int:
        return self.pools.state_bytes_per_slot

    def step(self, running: int, total_context_tokens: int) -> StepBreakdown:
        return step(self.cost, self.roofline, running, total_context_tokens)

    def step_time_s(self, running: int, total_context_tokens: int) -> float:
        """Seconds per decode step with ``running`` requests holding ``total_context_tokens`` tokens."""
        return step_time_s(self.cost, self.roofline, running, total_context_tokens)

    def prefill_time_s(self, new_tokens: int, context_tokens: int = 0) -> float:
        """Seconds to prefill ``new_tokens`` of one request after ``context_tokens`` cached ones."""
        return prefill_time_s(self.cost, self.roofline, new_tokens, context_tokens)

    def prefill_compute_s(self, tokens: float) -> float:
        """One request's share of batched prefill (compute only)."""
        return prefill_compute_s(self.cost, self.roofline, tokens)

    def kv_bound_running(self, avg_context: float, target_usage: float) -> int:
        """Requests of ``avg_context`` tokens that fit in ``target_usage`` of the KV pool."""
        return max(0, math.floor(self.kv_tokens * target_usage / max(avg_context, 1.0)))

    def decode_tok_s(self, running: int, avg_context: float) -> float:
        """Output tokens/s of this replica at ``running`` requests of ``avg_context`` tokens each."""
        return self.step(running, round(running * avg_context)).tokens_per_s


def default_eta(config: PlannerSpec, gpu: GpuSpec | None = None) -> float:
    """The bandwidth efficiency the planner assumes for ``gpu``: ``eta_bw`` (fitted on HBM cards), times
    ``eta_bw_gddr_ratio`` on a GDDR card, at most 1."""
    ratio = config.eta_bw_gddr_ratio if gpu is not None and gpu.is_gddr else 1.0
    return min(1.0, config.eta_bw * ratio)


def roofline_params(config: PlannerSpec, eta: float | None = None, gpu: GpuSpec | None = None) -> RooflineParams:
    """The roofline's efficiencies; an explicit ``eta`` (a calibration of the card itself) is used as given."""
    return RooflineParams(
        eta_bw=eta if eta is not None else default_eta(config, gpu),
        eta_compute=config.eta_compute,
        t_fixed_s=config.t_fixed_ms / 1000,
        t_fixed_no_overlap_s=config.t_fixed_no_overlap_ms / 1000,
        eta_request_ratio=config.eta_request_ratio,
    )


def build_capacity(
    model: ModelSpec, gpu: GpuSpec, flags: EngineFlags, config: PlannerSpec, eta: float | None = None
) -> ServerCapacity:
    """Capacity from resolved objects (pure)."""
    pools = size_pools(
        model, gpu, flags, cuda_context_gib=config.cuda_context_gib, sglang_version=config.sglang_version
    )
    cost = decode_cost(
        model,
        pools,
        bandwidth=gpu.bandwidth_bytes_s,
        matmul_flops=gpu.matmul_flops(pools.weight_dtype),
        tp=flags.tp_size,
        track_interval=flags.mamba_track_interval,
    )
    return ServerCapacity(model, gpu, flags, pools, cost, roofline_params(config, eta, gpu))


def server_capacity(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    flags: EngineFlags | str | Sequence[str] = "",
    *,
    config: PlannerSpec | None = None,
    eta: float | None = None,
) -> ServerCapacity:
    """Capacity of one replica; names are looked up in the bundled catalogs (a model may be a config.json path)."""
    from tokenmill.planner.catalog import load_model

    spec = load_model(model) if isinstance(model, str) else model
    card = GpuCatalog.load().get(gpu) if isinstance(gpu, str) else gpu
    parsed = flags if isinstance(flags, EngineFlags) else parse_flags(flags)
    return build_capacity(spec, card, parsed, config or PlannerSpec(), eta)
