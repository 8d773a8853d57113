"""The simulated server's physics: how long a step takes, who fits in, and how full the pools are.

:class:`StepModel` is the one replaceable part of the simulator. The scheduler asks it four questions and
never looks inside; a more faithful model (memory pools sized from SGLang flags, roofline step times) can
replace :class:`LinearStepModel` without touching the scheduler or the server. Times are unscaled: the
scheduler multiplies them by ``SimSpec.time_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tokenmill.config import SimSpec


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """How full the KV token pool and the Mamba state pool are (fractions in [0, 1] and absolute counts)."""

    token_usage: float
    """The busiest pool, as SGLang's ``token_usage`` gauge (max of full KV and Mamba usage)."""
    full_token_usage: float
    mamba_usage: float
    used_tokens: int
    mamba_used: int


class StepModel(Protocol):
    """Capacity and timing of one simulated engine (one DP rank)."""

    @property
    def max_running_requests(self) -> int:
        """The effective concurrency cap (SGLang's ``effective_max_running_requests_per_dp``)."""
        ...

    @property
    def max_total_tokens(self) -> int:
        """KV pool capacity in tokens (SGLang's ``max_total_num_tokens``)."""
        ...

    @property
    def mamba_slots(self) -> int:
        """Mamba state pool size in slots (SGLang's ``max_mamba_cache_size``)."""
        ...

    def step_time_s(self, running: int, ctx_tokens: int) -> float:
        """Seconds one decode step takes with ``running`` requests holding ``ctx_tokens`` tokens in all."""
        ...

    def prefill_time_s(self, new_tokens: int) -> float:
        """Seconds to prefill ``new_tokens`` prompt tokens (decode pauses meanwhile)."""
        ...

    def admit(self, running: int, ctx_tokens: int, new_tokens: int) -> bool:
        """Whether a request with ``new_tokens`` prompt tokens may start now."""
        ...

    def usage(self, running: int, ctx_tokens: int) -> PoolUsage:
        """Pool usage with ``running`` requests holding ``ctx_tokens`` tokens."""
        ...


class LinearStepModel:
    """Step time grows linearly with the batch; one Mamba slot per request; a KV pool of fixed size.

    ``step = step_base_ms + step_per_req_ms * running``; ``prefill = prefill_ms_per_1k * tokens / 1000``.
    This is SGLang with ``--disable-radix-cache``: the Mamba pool holds exactly ``max_running_requests``
    slots.
    """

    def __init__(self, cfg: SimSpec) -> None:
        self._max_running = cfg.max_running_requests
        self._max_tokens = cfg.max_total_tokens
        self._base_s = cfg.step_base_ms / 1000.0
        self._per_req_s = cfg.step_per_req_ms / 1000.0
        self._prefill_s_per_token = cfg.prefill_ms_per_1k / 1_000_000.0

    @property
    def max_running_requests(self) -> int:
        return self._max_running

    @property
    def max_total_tokens(self) -> int:
        return self._max_tokens

    @property
    def mamba_slots(self) -> int:
        return self._max_running

    def step_time_s(self, running: int, ctx_tokens: int) -> float:
        return self._base_s + self._per_req_s * running

    def prefill_time_s(self, new_tokens: int) -> float:
        return self._prefill_s_per_token * new_tokens

    def admit(self, running: int, ctx_tokens: int, new_tokens: int) -> bool:
        if running == 0:  # an idle engine always takes one request, however long
            return True
        return running < self._max_running and ctx_tokens + new_tokens <= self._max_tokens

    def usage(self, running: int, ctx_tokens: int) -> PoolUsage:
        full = min(1.0, ctx_tokens / self._max_tokens)
        mamba = min(1.0, running / self._max_running)
        return PoolUsage(
            token_usage=round(max(full, mamba), 2),  # SGLang rounds this gauge (not the others)
            full_token_usage=full,
            mamba_usage=mamba,
            used_tokens=ctx_tokens,
            mamba_used=running,
        )
