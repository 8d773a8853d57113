"""Plans as plain dicts for ``tokenmill plan --json`` (no I/O here)."""

from __future__ import annotations

import math
from typing import Any

from tokenmill.planner.hardware import GIB, GpuSpec
from tokenmill.planner.memory import MIB
from tokenmill.planner.models import ModelSpec, param_counts, weight_bytes
from tokenmill.planner.plan import PlanResult
from tokenmill.planner.report import PlanReport, notes, ssm_lines
from tokenmill.planner.whatif import WhatIfRow


def ssm_dict(report: PlanReport) -> dict[str, Any] | None:
    a = report.ssm
    if a is None:
        return None
    o = a.other_result
    other = None if o is None else {"running": o.running, "binding": o.binding, "tok_s_per_gpu": o.tok_s_per_gpu}
    return {
        "dtype": a.dtype,
        "source": a.source,
        "other": {"dtype": a.other, "flag": a.other_flag, "plan": other, "error": a.other_error},
        "text": ssm_lines(report),
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def result_dict(r: PlanResult) -> dict[str, Any]:
    cap = r.capacity
    p = cap.pools
    return {
        "command": r.command,
        "gpus": r.gpus,
        "replicas": r.replicas,
        "tp_size": cap.gpus,
        "mem_fraction_static": p.mem_fraction_static,
        "mem_fraction_auto": p.mem_fraction_auto,
        "weights_gib": p.weights_gib,
        "weight_dtype": p.weight_dtype,
        "rest_gib": p.rest_gib,
        "headroom_gib": p.headroom_gib,
        "strategy": p.strategy.strategy,
        "radix_cache": p.strategy.radix_cache,
        "overlap": p.strategy.overlap,
        "slots_per_request": p.slots_per_request,
        "ssm_dtype": p.ssm_dtype if cap.model.is_hybrid else None,
        "state_bytes_per_slot": p.state_bytes_per_slot,
        "mamba_slots": p.mamba_slots,
        "mamba_slots_source": p.mamba_slots_source,
        "state_gib": p.state_gib,
        "kv_dtype": p.kv_dtype,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_tokens": p.kv_tokens,
        "kv_gib": p.kv_gib,
        "max_running": p.max_running,
        "max_running_source": p.max_running_source,
        "running": r.running,
        "binding": r.binding,
        "limits": r.limits,
        "step_ms": r.step.time_s * 1000,
        "step_bound": r.step.bound,
        "step_bytes": r.step.bytes,
        "step_flops": r.step.flops,
        "decode_tok_s_per_gpu": r.decode_tok_s / cap.gpus,
        "prefill_s_per_request": r.prefill_s_per_request,
        "tok_s_per_gpu": r.tok_s_per_gpu,
        "fleet_tok_s": r.fleet_tok_s,
        "eta_s": _finite(r.eta_s),
        "ceiling_tok_s_per_gpu": r.ceiling_tok_s_per_gpu,
        "curve": [{"running": c.running, "tok_s_per_gpu": c.tok_s_per_gpu, "bound": c.bound} for c in r.curve],
        "notes": list(p.notes),
    }


def _model_dict(m: ModelSpec) -> dict[str, Any]:
    p = param_counts(m)
    return {
        "name": m.name,
        "model_type": m.model_type,
        "params_total": p.total,
        "params_active": p.active,
        "weight_dtype": m.weight_dtype,
        "weight_bytes_resident": weight_bytes(m).resident,
        "attention_layers": m.attention.layers,
        "recurrent_layers": m.recurrent.layers if m.recurrent else 0,
        "recurrent_kind": m.recurrent.kind if m.recurrent else None,
        "assumed": list(m.assumed),
        "sources": list(m.sources),
    }


def _gpu_dict(g: GpuSpec) -> dict[str, Any]:
    return {
        "key": g.key,
        "name": g.name,
        "memory_gib": g.memory_mib * MIB / GIB,
        "bandwidth_gbs": g.bandwidth_gbs,
        "bf16_tflops": g.bf16_tflops,
        "fp8_tflops": g.fp8_tflops,
        "fp4_tflops": g.fp4_tflops,
        "unverified": list(g.unverified),
    }


def what_if_dicts(rows: tuple[WhatIfRow, ...]) -> list[dict[str, Any]]:
    return [
        {
            "rank": i,
            "base": row.is_base,
            "strategy": row.strategy,
            "ssm_dtype": row.ssm_dtype,
            "weight_dtype": row.weight_dtype,
            "mem_fraction_static": row.mem_fraction,
            "flags": row.command,
            "notes": list(row.notes),
            "error": row.error,
            "plan": result_dict(row.result) if row.result else None,
        }
        for i, row in enumerate(rows, 1)
    ]


def report_dict(report: PlanReport) -> dict[str, Any]:
    r = report.result
    w = r.workload
    return {
        "model": _model_dict(r.capacity.model),
        "gpu": _gpu_dict(r.capacity.gpu),
        "workload": {
            "prompts": w.prompts,
            "input_len": w.input_len,
            "output_len": w.output_len,
            "avg_context": w.avg_context,
            "max_tokens": w.limit,
            "ignore_eos": w.ignore_eos,
            "source": w.source,
        },
        "assumptions": {
            "eta_bw": r.capacity.roofline.eta_bw,
            "eta_source": report.eta_source,
            "eta_request_ratio": r.capacity.roofline.eta_request_ratio,
            "eta_compute": r.capacity.roofline.eta_compute,
            "t_fixed_ms": r.capacity.roofline.t_fixed_s * 1000,
            "t_fixed_no_overlap_ms": r.capacity.roofline.t_fixed_no_overlap_s * 1000,
            "cuda_context_gib": report.config.cuda_context_gib,
            "kv_target_usage": report.config.kv_target_usage,
            "sglang_version": report.config.sglang_version,
        },
        "plan": result_dict(r),
        "ssm_state": ssm_dict(report),
        "compare": [
            {
                "gpu": c.reference.key,
                "percent": c.percent,
                "error": c.error,
                "plan": result_dict(c.result) if c.result else None,
            }
            for c in report.comparisons
        ],
        "what_if": what_if_dicts(report.what_if),
        "notes": notes(report),
    }
