"""Decode step time on one GPU: a roofline over bytes moved and FLOPs (docs/reference/hardware.md §4).

::

    weights  = W_dense + W_experts * touched(B)                      # streamed at eta_bw * BW
    request  = B * (2 * slot + logits) + K * kv_bytes_per_token       # streamed at eta_bw * r * BW
    flops    = B * (2 * P_compute + recurrent) + K * 4 * heads * head_dim * attention_layers
    t_step   = max(weights / (eta_bw * BW) + request / (eta_bw * r * BW), flops / (eta_c * F)) + t_fixed

with B running requests holding K context tokens in total, all per GPU (divided by TP). ``touched(B)`` is
the expected share of routed experts a batch of B tokens reads, ``1 - (1 - k/E)**B`` under uniform routing.
``r`` (``eta_request_ratio``) is how much less efficiently the per-request traffic moves than the weight
stream: recurrent-state read-modify-writes and paged KV reads are many small, strided accesses per request
and layer, where the weights are long contiguous reads; so the achieved bandwidth falls as the running
count grows and per-request traffic takes over. Prefill dilution, when every request is prefilled once:
``R_out = T / (1 + T * t_prefill / L_out)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.planner.memory import PoolPlan
from tokenmill.planner.models import ModelSpec, decode_flops_per_token, weight_bytes


@dataclass(frozen=True, slots=True)
class RooflineParams:
    """Efficiencies and fixed costs; defaults live in :class:`tokenmill.config.PlannerSpec`."""

    eta_bw: float
    eta_compute: float
    t_fixed_s: float
    t_fixed_no_overlap_s: float
    eta_request_ratio: float = 1.0  # per-request traffic efficiency as a share of eta_bw


@dataclass(frozen=True, slots=True)
class DecodeCost:
    """What one decode step moves and computes on one GPU, split into fixed, per-request and per-token parts."""

    weights_dense_bytes: float  # read every step
    experts_bytes: float  # all routed experts on this GPU
    experts: int
    top_k: int
    state_rw_bytes_per_request: float  # recurrent state read + write (+ extra_buffer track copies)
    logits_bytes_per_request: float  # fp32 logits write + read
    kv_bytes_per_token: float  # KV read per context token per step
    flops_per_request: float  # weights + recurrent update, per decoded token
    attn_flops_per_context_token: float
    bandwidth: float  # bytes/s
    matmul_flops: float  # FLOP/s
    overlap: bool
    prefill_weight_flops_per_token: float
    prefill_attn_flops_per_pair: float  # per (query, key) pair

    def experts_touched(self, tokens: int) -> float:
        """Expected fraction of routed experts a batch of ``tokens`` tokens reads."""
        if not self.experts or tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - self.top_k / self.experts) ** tokens


def decode_cost(
    model: ModelSpec, pools: PoolPlan, bandwidth: float, matmul_flops: float, tp: int, track_interval: int
) -> DecodeCost:
    """Per-GPU step quantities for ``model`` with the pools (dtypes, strategy) of ``pools``."""
    w = weight_bytes(model, pools.weight_dtype)
    base = decode_flops_per_token(model, 0)
    per_ctx = decode_flops_per_token(model, 1) - base
    copies = 1.0 / track_interval if pools.strategy.strategy.startswith("extra_buffer") else 0.0
    return DecodeCost(
        weights_dense_bytes=w.read_dense / tp,
        experts_bytes=w.read_experts / tp,
        experts=model.moe.experts if model.moe else 0,
        top_k=model.moe.top_k if model.moe else 0,
        state_rw_bytes_per_request=2.0 * pools.state_bytes_per_slot * (1.0 + copies),
        logits_bytes_per_request=model.vocab / tp * 4 * 2,
        kv_bytes_per_token=float(pools.kv_bytes_per_token),
        flops_per_request=base / tp,
        attn_flops_per_context_token=per_ctx / tp,
        bandwidth=bandwidth,
        matmul_flops=matmul_flops,
        overlap=pools.strategy.overlap,
        prefill_weight_flops_per_token=base / tp,
        prefill_attn_flops_per_pair=4.0
        * model.attention.heads
        * model.attention.head_dim
        * model.attention.layers
        / tp,
    )


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One decode step: what it moves and computes, and the time each side takes."""

    running: int
    context_tokens: int
    weight_bytes: float
    request_bytes: float  # recurrent state, KV and logits of the running requests
    effective_bytes: float  # weight bytes plus request bytes weighed by their lower efficiency
    flops: float
    t_memory_s: float
    t_compute_s: float
    t_fixed_s: float

    @property
    def bytes(self) -> float:
        """Bytes this step moves."""
        return self.weight_bytes + self.request_bytes

    @property
    def time_s(self) -> float:
        return max(self.t_memory_s, self.t_compute_s) + self.t_fixed_s

    @property
    def bound(self) -> str:
        return "memory" if self.t_memory_s >= self.t_compute_s else "compute"

    @property
    def tokens_per_s(self) -> float:
        return self.running / self.time_s if self.running else 0.0


def fixed_time(cost: DecodeCost, params: RooflineParams) -> float:
    return params.t_fixed_s if cost.overlap else params.t_fixed_no_overlap_s


def step(cost: DecodeCost, params: RooflineParams, running: int, context_tokens: int) -> StepBreakdown:
    """The roofline of one decode step with ``running`` requests holding ``context_tokens`` tokens in total."""
    b = max(0, running)
    weights = cost.weights_dense_bytes + cost.experts_bytes * cost.experts_touched(b)
    request = b * (cost.state_rw_bytes_per_request + cost.logits_bytes_per_request)
    request += context_tokens * cost.kv_bytes_per_token
    effective = weights + request / params.eta_request_ratio
    flops = b * cost.flops_per_request + context_tokens * cost.attn_flops_per_context_token
    return StepBreakdown(
        running=b,
        context_tokens=context_tokens,
        weight_bytes=weights,
        request_bytes=request,
        effective_bytes=effective,
        flops=flops,
        t_memory_s=effective / (params.eta_bw * cost.bandwidth),
        t_compute_s=flops / (params.eta_compute * cost.matmul_flops),
        t_fixed_s=fixed_time(cost, params),
    )


def step_time_s(cost: DecodeCost, params: RooflineParams, running: int, context_tokens: int) -> float:
    """Seconds per decode step (0 when nothing runs)."""
    if running <= 0:
        return 0.0
    return step(cost, params, running, context_tokens).time_s


def prefill_time_s(cost: DecodeCost, params: RooflineParams, tokens: int, context_before: int = 0) -> float:
    """Seconds to prefill ``tokens`` new tokens of one request after ``context_before`` cached ones."""
    if tokens <= 0:
        return 0.0
    pairs = tokens * (context_before + tokens / 2.0)
    flops = tokens * cost.prefill_weight_flops_per_token + pairs * cost.prefill_attn_flops_per_pair
    moved = cost.weights_dense_bytes + cost.experts_bytes * cost.experts_touched(tokens)
    request = (context_before + tokens) * cost.kv_bytes_per_token + cost.state_rw_bytes_per_request
    moved += request / params.eta_request_ratio
    t = max(moved / (params.eta_bw * cost.bandwidth), flops / (params.eta_compute * cost.matmul_flops))
    return t + fixed_time(cost, params)


def prefill_compute_s(cost: DecodeCost, params: RooflineParams, tokens: float) -> float:
    """Compute time of one request's prefill inside a large batch (weight reads amortized away)."""
    pairs = tokens * tokens / 2.0
    flops = tokens * cost.prefill_weight_flops_per_token + pairs * cost.prefill_attn_flops_per_pair
    return flops / (params.eta_compute * cost.matmul_flops)


def diluted_output_rate(decode_tok_s: float, prefill_s_per_request: float, output_len: float) -> float:
    """Output tokens/s when each request also needs ``prefill_s_per_request`` of the same GPU time."""
    if decode_tok_s <= 0 or output_len <= 0:
        return 0.0
    return decode_tok_s / (1.0 + decode_tok_s * prefill_s_per_request / output_len)


def asymptotic_tok_s(cost: DecodeCost, params: RooflineParams, avg_context: float) -> float:
    """One replica's memory-bound ceiling as running grows: eta*r*BW / per-request bytes per GPU (no weights)."""
    per_request = (
        cost.state_rw_bytes_per_request + cost.logits_bytes_per_request + avg_context * cost.kv_bytes_per_token
    )
    return params.eta_bw * params.eta_request_ratio * cost.bandwidth / per_request


def saturation_points(max_running: int) -> list[int]:
    """Running counts for a saturation curve: powers of two up to ``max_running``, and ``max_running``."""
    points = []
    b = 1
    while b < max_running:
        points.append(b)
        b *= 2
    points.append(max(1, max_running))
    return points
