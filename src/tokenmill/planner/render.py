"""Plans as rich tables for a terminal and as plain dicts for ``--json`` (no I/O here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokenmill.config import PlannerSpec
from tokenmill.fmt import duration
from tokenmill.planner.hardware import GIB, GpuSpec
from tokenmill.planner.memory import MIB
from tokenmill.planner.models import ModelSpec, param_counts, weight_bytes
from tokenmill.planner.plan import Comparison, PlanResult, WhatIfRow
from tokenmill.planner.ssm import SsmAssumption
from tokenmill.planner.workload import Workload


@dataclass(frozen=True, slots=True)
class PlanReport:
    """Everything ``tokenmill plan`` shows."""

    result: PlanResult
    comparisons: tuple[Comparison, ...]
    what_if: tuple[WhatIfRow, ...]
    config: PlannerSpec
    eta_source: str
    ssm: SsmAssumption | None = None  # a hybrid's SSM state dtype, where it comes from, the other dtype's plan


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _mfs(value: float | None) -> str:
    return "auto" if value is None else f"{value:g}"


def _flags_text(command: str) -> str:
    return command or "(SGLang defaults)"


def capacity_table(r: PlanResult) -> Table:
    cap = r.capacity
    p = cap.pools
    t = Table(title="Capacity of one GPU", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("weights", f"{p.weights_gib:.2f} GiB ({p.weight_dtype})")
    t.add_row(
        "--mem-fraction-static",
        f"{p.mem_fraction_static:g} ({'SGLang auto' if p.mem_fraction_auto else 'flag'}); "
        f"{p.headroom_gib:.1f} GiB left outside the pools",
    )
    t.add_row("KV + state budget", f"{p.rest_gib:.2f} GiB")
    if cap.model.is_hybrid:
        s = p.strategy
        t.add_row(
            "state slots",
            f"{p.mamba_slots:,} x {p.state_slot_mib:.2f} MiB ({p.ssm_dtype} SSM) = {p.state_gib:.2f} GiB "
            f"({p.mamba_slots_source})",
        )
        t.add_row(
            "slots per request (S)",
            f"{s.slots_per_request} ({s.strategy}, overlap {'on' if s.overlap else 'off'})",
        )
    t.add_row(
        "KV cache",
        f"{p.kv_tokens:,} tokens x {p.kv_bytes_per_token:,} B ({p.kv_dtype}) = {p.kv_gib:.2f} GiB",
    )
    t.add_row("max running", f"{p.max_running:,} ({p.max_running_source})")
    limits = ", ".join(f"{k} {v:,}" for k, v in r.limits.items())
    t.add_row("running (steady state)", Text.assemble((f"{r.running:,}", "bold"), f" bound by {r.binding} ({limits})"))
    st = r.step
    t.add_row(
        "decode step",
        f"{st.time_s * 1000:.1f} ms, {st.bound}-bound ({st.bytes / 1e9:.1f} GB, {st.flops / 1e12:.2f} TFLOP per GPU)",
    )
    t.add_row("decode", f"{_n(r.decode_tok_s / cap.gpus)} tok/s per GPU")
    t.add_row(
        "with prefill",
        Text.assemble(
            (f"{_n(r.tok_s_per_gpu)} tok/s per GPU", "bold green"),
            f" ({r.prefill_s_per_request:.3f} s prefill a request)",
        ),
    )
    servers = f"{r.replicas} server{'s' if r.replicas > 1 else ''} of {cap.gpus} GPU{'s' if cap.gpus > 1 else ''}"
    t.add_row("fleet", f"{_n(r.fleet_tok_s)} tok/s ({servers})")
    eta = duration(r.eta_s if math.isfinite(r.eta_s) else None)
    t.add_row("ETA", f"{eta} for {r.workload.output_tokens / 1e6:,.2f} M output tokens")
    return t


def curve_table(r: PlanResult) -> Table:
    t = Table(title="Saturation curve (one GPU)", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("running", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("bound")
    for pt in r.curve:
        t.add_row(f"{pt.running:,}", _n(pt.tok_s_per_gpu), pt.bound)
    t.caption = f"ceiling as running grows: {_n(r.ceiling_tok_s_per_gpu)} tok/s"
    return t


def compare_table(r: PlanResult, comparisons: tuple[Comparison, ...]) -> Table:
    t = Table(
        title=f"Other GPUs, same model, flags and workload ({r.capacity.gpu.key} as a share of each)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    t.add_column("GPU", no_wrap=True)
    t.add_column("running", justify="right")
    t.add_column("bound by")
    t.add_column("tok/s/GPU", justify="right")
    t.add_column(f"{r.capacity.gpu.key} is", justify="right", no_wrap=True)
    for c in comparisons:
        if c.result is None:
            t.add_row(c.reference.key, "-", "does not fit", "-", "-")
            continue
        pct = f"{c.percent:.0f}%" if c.percent is not None else "-"
        t.add_row(c.reference.key, f"{c.result.running:,}", c.result.binding, _n(c.result.tok_s_per_gpu), pct)
    return t


def _row_cells(row: WhatIfRow, base: float) -> list[str]:
    res = row.result
    assert res is not None
    vs = f"{100 * row.tok_s_per_gpu / base:.0f}%" if base > 0 else "-"
    dtypes = f"{row.ssm_dtype}/{row.weight_dtype}" if row.ssm_dtype else row.weight_dtype
    return [
        row.strategy,
        dtypes,
        _mfs(row.mem_fraction),
        f"{res.running:,}",
        res.binding,
        _n(row.tok_s_per_gpu),
        vs,
    ]


def _ranked_table(title: str, base: float, rows: list[tuple[int, WhatIfRow]], caption: str | None) -> Group:
    t = Table(
        title=title, title_justify="left", caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("strategy", no_wrap=True)
    t.add_column("ssm/wts", no_wrap=True)
    t.add_column("mfs", no_wrap=True)
    t.add_column("run", justify="right", no_wrap=True)
    t.add_column("bound by", min_width=11)
    t.add_column("tok/s/GPU", justify="right", no_wrap=True)
    t.add_column("vs", justify="right", no_wrap=True)
    flags = Table(show_header=False, box=None, pad_edge=False)
    flags.add_column("#", justify="right", style="bold")
    flags.add_column("flags", overflow="fold")
    for rank, row in rows:
        label = f"{'*' if row.is_base else ''}{rank}"
        t.add_row(label, *_row_cells(row, base), style="bold" if row.is_base else None)
        flags.add_row(label, _flags_text(row.command))
    return Group(t, Text("flags for each row (append to your launch command):", style="italic"), flags, Text(""))


def strategy_table(base: float, rows: tuple[WhatIfRow, ...]) -> Group | None:
    """The strategies side by side at the user's dtypes and memory fraction (hybrid models only)."""
    base_row = next((r for r in rows if r.is_base), None)
    if base_row is None or base_row.result is None or not base_row.result.capacity.model.is_hybrid:
        return None
    same = [
        r
        for r in rows
        if r.result is not None
        and (
            r.is_base
            or (r.ssm_dtype, r.weight_dtype, r.mem_fraction)
            == (base_row.ssm_dtype, base_row.weight_dtype, base_row.mem_fraction)
        )
    ]
    title = "Strategies at your dtypes and memory fraction (* = your flags)"
    return _ranked_table(title, base, list(enumerate(same, 1)), None)


def what_if_table(base: float, rows: tuple[WhatIfRow, ...], shown: int) -> Group:
    """Ranked what-if rows; ``base`` is the per-GPU rate of the user's flags (0 when they do not fit)."""
    fitting = list(enumerate((row for row in rows if row.result is not None), 1))
    visible = fitting[:shown]
    if not any(row.is_base for _, row in visible):
        visible += [(rank, row) for rank, row in fitting if row.is_base]
    failed = len(rows) - len(fitting)
    parts = []
    if len(fitting) > len(visible):
        parts.append(f"{len(fitting) - len(visible)} more rows in --json")
    if failed:
        parts.append(f"{failed} combinations do not fit")
    title = "What if: strategy x SSM dtype x weight dtype x memory fraction, best first"
    return _ranked_table(title, base, visible, "; ".join(parts) or None)


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


def header(report: PlanReport) -> Text:
    r = report.result
    cap = r.capacity
    p = param_counts(cap.model)
    size = f"{p.total / 1e9:.1f} B params" + (f", {p.active / 1e9:.1f} B active" if cap.model.is_moe else "")
    w = r.workload
    return Text.assemble(
        (cap.model.name, "bold"),
        f" ({size}) on {r.gpus} x ",
        (cap.gpu.name, "bold"),
        f"\nflags: {_flags_text(r.command)}\nworkload: {w.prompts:,} prompts, {w.input_len:,.0f} tokens in / "
        f"{w.output_len:,.0f} out on average{_limit_text(w)} ({w.source})",
    )


def _limit_text(w: Workload) -> str:
    """The requests' limit and kind, when they are not the default (ordinary requests, the mean as the limit)."""
    if w.ignore_eos:
        return f", ignore_eos (every answer runs to max_tokens {w.limit:,})"
    return f", max_tokens {w.limit:,}" if w.max_tokens is not None else ""


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
        f"{_n(o.tok_s_per_gpu)} tok/s per GPU ({gain * 100:+.0f}%), ETA {eta}"
    )
    return lines


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


def render_plan(report: PlanReport) -> RenderableType:
    parts: list[RenderableType] = [header(report), capacity_table(report.result)]
    if report.ssm is not None:
        parts.append(Text("\n".join(ssm_lines(report))))
    parts.append(curve_table(report.result))
    if report.comparisons:
        parts.append(compare_table(report.result, report.comparisons))
    if report.what_if:
        base = report.result.tok_s_per_gpu
        strategies = strategy_table(base, report.what_if)
        if strategies is not None:
            parts.append(strategies)
        parts.append(what_if_table(base, report.what_if, report.config.whatif_rows_shown))
    parts.append(Text("\n".join(f"note: {n}" for n in notes(report)), style="dim"))
    return Group(*parts)


# --------------------------------------------------------------------------------------------------
# JSON


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
