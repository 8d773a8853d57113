"""Plans as rich tables for a terminal (no I/O here; as plain dicts for ``--json``: :mod:`.report_json`)."""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokenmill.fmt import duration
from tokenmill.planner.models import param_counts
from tokenmill.planner.plan import Comparison, PlanResult
from tokenmill.planner.report import PlanReport, notes, ssm_lines, whole
from tokenmill.planner.whatif import WhatIfRow
from tokenmill.planner.workload import Workload


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
    t.add_row("decode", f"{whole(r.decode_tok_s / cap.gpus)} tok/s per GPU")
    t.add_row(
        "with prefill",
        Text.assemble(
            (f"{whole(r.tok_s_per_gpu)} tok/s per GPU", "bold green"),
            f" ({r.prefill_s_per_request:.3f} s prefill a request)",
        ),
    )
    servers = f"{r.replicas} server{'s' if r.replicas > 1 else ''} of {cap.gpus} GPU{'s' if cap.gpus > 1 else ''}"
    t.add_row("fleet", f"{whole(r.fleet_tok_s)} tok/s ({servers})")
    eta = duration(r.eta_s if math.isfinite(r.eta_s) else None)
    t.add_row("ETA", f"{eta} for {r.workload.output_tokens / 1e6:,.2f} M output tokens")
    return t


def curve_table(r: PlanResult) -> Table:
    t = Table(title="Saturation curve (one GPU)", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("running", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("bound")
    for pt in r.curve:
        t.add_row(f"{pt.running:,}", whole(pt.tok_s_per_gpu), pt.bound)
    t.caption = f"ceiling as running grows: {whole(r.ceiling_tok_s_per_gpu)} tok/s"
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
        t.add_row(c.reference.key, f"{c.result.running:,}", c.result.binding, whole(c.result.tok_s_per_gpu), pct)
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
        whole(row.tok_s_per_gpu),
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
