"""The SSM state dtype a plan assumes, where that comes from, and the same plan with the other dtype.

SGLang 0.5.23 keeps a hybrid's recurrent (SSM) state in the dtype of ``--mamba-ssm-dtype`` (or
``SGLANG_MAMBA_SSM_DTYPE``), else the model config's ``mamba_ssm_dtype``, else float32
(docs/reference/sglang.md §1.1). The state is read and written every decode step and a slot is sized by it, so
the dtype moves both the running count and the step time: a plan names the one it assumed and shows the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.config import PlannerSpec
from tokenmill.errors import DoesNotFitError
from tokenmill.planner.flags import EngineFlags
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.models import ModelSpec, StateDtype
from tokenmill.planner.plan import PlanResult, Workload
from tokenmill.planner.plan import plan as make_plan

FLAG_VALUE: dict[StateDtype, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
RULE = "SGLang 0.5.23: the flag, else the model config's mamba_ssm_dtype, else float32"


@dataclass(frozen=True, slots=True)
class SsmAssumption:
    """The dtype planned, its source in words, and the plan with the other dtype (or why it does not fit)."""

    dtype: StateDtype
    source: str
    other: StateDtype
    other_result: PlanResult | None
    other_error: str | None = None

    @property
    def other_flag(self) -> str:
        return f"--mamba-ssm-dtype {FLAG_VALUE[self.other]}"


def ssm_source(model: ModelSpec, flags: EngineFlags) -> tuple[StateDtype, str]:
    """The SSM dtype SGLang would use for ``model`` with ``flags``, and where it comes from."""
    if flags.mamba_ssm_dtype is not None:
        return flags.mamba_ssm_dtype, "the flags (--mamba-ssm-dtype or SGLANG_MAMBA_SSM_DTYPE)"
    if model.ssm_dtype_from_config:
        return model.ssm_dtype, f"the model config's mamba_ssm_dtype ({RULE})"
    return model.ssm_dtype, f"no flag and none in the model config ({RULE})"


def ssm_assumption(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: EngineFlags,
    workload: Workload,
    config: PlannerSpec,
    *,
    gpu_count: int = 1,
    eta: float | None = None,
) -> SsmAssumption | None:
    """For a hybrid model: the dtype assumed and the plan with the other one (bf16 for fp32, else fp32)."""
    if not model.is_hybrid:
        return None
    dtype, source = ssm_source(model, flags)
    other: StateDtype = "bf16" if dtype == "fp32" else "fp32"
    try:
        result = make_plan(
            model, gpu, flags.with_(mamba_ssm_dtype=other), workload, config, gpu_count=gpu_count, eta=eta
        )
    except DoesNotFitError as exc:
        return SsmAssumption(dtype, source, other, None, str(exc))
    return SsmAssumption(dtype, source, other, result)
