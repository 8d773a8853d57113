"""What ``tokenmill plan`` shows, as data: the :class:`PlanReport` and its lines of plain text.

The lines (the notes, the SSM state's) are carried by the terminal view (:mod:`tokenmill.planner.render`) and by
``--json`` (:mod:`tokenmill.planner.report_json`) alike."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.config import PlannerSpec
from tokenmill.fmt import duration
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.plan import Comparison, PlanResult
from tokenmill.planner.ssm import SsmAssumption
from tokenmill.planner.whatif import WhatIfRow


@dataclass(frozen=True, slots=True)
class PlanReport:
    """Everything ``tokenmill plan`` shows."""

    result: PlanResult
    comparisons: tuple[Comparison, ...]
    what_if: tuple[WhatIfRow, ...]
    config: PlannerSpec
    eta_source: str
    ssm: SsmAssumption | None = None  # a hybrid's SSM state dtype, where it comes from, the other dtype's plan


def whole(x: float) -> str:
    """A count or a rate as a whole number with thousands separators."""
    return f"{x:,.0f}"


def notes(report: PlanReport) -> list[str]:
    r = report.result
    cap = r.capacity
    out = list(dict.fromkeys(cap.pools.notes))
    gpu: GpuSpec = cap.gpu
    if gpu.unverified:
        out.append(f"{gpu.name}: unverified numbers: {', '.join(gpu.unverified)} (see gpus.yaml sources)")
    if cap.model.assumed:
        out.append(f"{cap.model.name}: assumed config fields: {'; '.join(cap.model.assumed)}")
    if cap.flags.ignored:
        out.append(f"flags not modeled (ignored): {' '.join(cap.flags.ignored)}")
    out.append(
        f"eta_bw {cap.roofline.eta_bw:g} ({report.eta_source}; state/KV traffic at "
        f"{cap.roofline.eta_request_ratio:g} x eta_bw), eta_compute {cap.roofline.eta_compute:g}, "
        f"SGLang {cap.sglang_version or 'newest'} rules, t_fixed {cap.roofline.t_fixed_s * 1000:g} ms "
        f"({cap.roofline.t_fixed_no_overlap_s * 1000:g} ms without "
        "overlap); prefix-cache hits are not modeled"
    )
    return out


def ssm_lines(report: PlanReport) -> list[str]:
    """The SSM state dtype planned and where it comes from, then the plan with the other dtype."""
    a, r = report.ssm, report.result
    if a is None:
        return []
    lines = [f"SSM state: {a.dtype}, from {a.source}"]
    o = a.other_result
    if o is None:
        lines.append(f"with {a.other} state ({a.other_flag}): does not fit: {a.other_error}")
        return lines
    gain = o.tok_s_per_gpu / r.tok_s_per_gpu - 1 if r.tok_s_per_gpu > 0 else 0.0
    eta = duration(o.eta_s if math.isfinite(o.eta_s) else None)
    lines.append(
        f"with {a.other} state ({a.other_flag}): {o.running:,} running (bound by {o.binding}), "
        f"{whole(o.tok_s_per_gpu)} tok/s per GPU ({gain * 100:+.0f}%), ETA {eta}"
    )
    return lines
