"""What the doctor plans one server with (model, GPU, the client's requests, SGLang release), and the plan of it.

:class:`PlanSetting`: the model, the GPU, the requests the client sends (their mean lengths, limit, kind and spread)
and the SGLang release; :meth:`PlanSetting.plan` is the planner's answer for given flags.

:func:`or_none` is how the doctor asks the planner anything: what the planner refuses (an unknown model or GPU, flags
that do not fit: its ``ConfigError``) is None, said at INFO; any other error is a bug in the planner, logged with its
traceback (None too, so a long run goes on).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tokenmill.config import PlannerSpec
from tokenmill.doctor.model import ClientObs
from tokenmill.errors import ConfigError

if TYPE_CHECKING:
    from tokenmill.planner.hardware import GpuSpec
    from tokenmill.planner.models import ModelSpec
    from tokenmill.planner.plan import PlanResult, Workload

log = logging.getLogger(__name__)
T = TypeVar("T")

STEADY_PROMPTS = 1_000_000  # the prompt count never binds a steady-state prediction
DEFAULT_INPUT_LEN = 1024.0
DEFAULT_OUTPUT_LEN = 1024.0


def per_request(tokens_s: float | None, requests_s: float | None) -> float | None:
    """Mean tokens per finished request from the server's own counters."""
    return tokens_s / requests_s if tokens_s and requests_s else None


def or_none(what: str, call: Callable[[], T]) -> T | None:
    """``call()``, or None when the planner refuses (its ConfigError, said at INFO: ``what``); any other error is a
    bug in the planner, logged at ERROR with its traceback."""
    try:
        return call()
    except ConfigError as exc:
        log.info("%s: %s", what, exc)
    except Exception:
        log.exception("%s: the planner failed", what)
    return None


def length_sigma(client: ClientObs) -> float | None:
    """The log-normal sigma of the answers' lengths from the median and 90th percentile of those not cut at
    max_tokens (``ln(p90 / p50) / 1.2816``, rounded to 0.05), None without both: the planner then assumes its
    default spread. The running set's size in steady state depends on it (long answers run longer)."""
    p50, p90 = client.completed_p50, client.completed_p90
    if not p50 or not p90 or p90 <= p50:
        return None
    return max(0.05, round(math.log(p90 / p50) / _Z90 / 0.05) * 0.05)


_Z90 = 1.2816  # the standard normal's 90th percentile


def two_digits(x: float) -> float:
    """``x`` to two significant digits: a workload that drifts a little plans (and caches) as the same."""
    return float(f"{x:.2g}")


@dataclass(frozen=True, slots=True)
class PlanSetting:
    """What one server is planned with: model, GPU, the observed workload, the requests' kind and the SGLang
    release."""

    model_name: str
    gpu_name: str
    model: ModelSpec
    gpu: GpuSpec
    inp: float
    out: float
    max_tokens: int | None
    ignore_eos: bool
    version: str | None
    config: PlannerSpec
    sigma: float | None = None  # the answers' length spread, from the client's quantiles (None: unknown)

    @property
    def key(self) -> tuple[object, ...]:
        return (
            self.model_name, self.gpu_name, self.inp, self.out, self.max_tokens, self.ignore_eos, self.version,
            self.sigma,
        )  # fmt: skip

    def workload(self, prompts: int = STEADY_PROMPTS) -> Workload:
        """The client's requests as the planner plans them: their lengths, limit and kind."""
        from tokenmill.planner.workload import request_workload

        return request_workload(
            prompts, self.inp, self.out, self.max_tokens, self.ignore_eos, "doctor", output_sigma=self.sigma
        )

    def plan(self, flags: list[str], config: PlannerSpec | None = None) -> PlanResult:
        """``flags`` planned for this server and its requests (with ``config``: other assumptions)."""
        from tokenmill.planner.flags import parse_flags
        from tokenmill.planner.plan import plan

        engine = parse_flags(flags)
        return plan(self.model, self.gpu, engine, self.workload(), config or self.config, gpu_count=engine.tp_size)
