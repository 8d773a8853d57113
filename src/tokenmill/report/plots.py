"""The report's figures, drawn with matplotlib's Agg canvas (no display, no global pyplot state).

Each function returns PNG bytes, or None when the event log holds nothing to draw for it. With more than
:data:`MAX_LINES` servers the per-server lines give way to the fleet's mean and its min-max band.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tokenmill.histogram import Histogram
from tokenmill.report.data import RunData

MAX_LINES = 12
WIDTH, HEIGHT, DPI = 10.0, 3.6, 100


def _scale(times: Sequence[float]) -> tuple[float, str]:
    top = max((t for t in times if not math.isnan(t)), default=0.0)
    if top > 3 * 3600:
        return 3600.0, "hours since start"
    if top > 180:
        return 60.0, "minutes since start"
    return 1.0, "seconds since start"


def _figure(rows: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(WIDTH, HEIGHT * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _has(values: Sequence[float]) -> bool:
    return any(not math.isnan(v) for v in values)


def _per_server(ax: Axes, data: RunData, key: str, xs: list[float], label: str, dashed_key: str | None = None) -> bool:
    urls = [u for u, s in data.servers.items() if _has(s[key])]
    if not urls:
        return False
    if len(urls) <= MAX_LINES:
        for i, url in enumerate(urls):
            color = f"C{i % 10}"
            ax.plot(xs, data.servers[url][key], color=color, lw=1.2, label=url)
            if dashed_key and _has(data.servers[url][dashed_key]):
                ax.plot(xs, data.servers[url][dashed_key], color=color, lw=1, ls="--")
    else:
        cols = list(zip(*(data.servers[u][key] for u in urls), strict=True))
        lo = [min((v for v in c if not math.isnan(v)), default=math.nan) for c in cols]
        hi = [max((v for v in c if not math.isnan(v)), default=math.nan) for c in cols]
        vals = [[v for v in c if not math.isnan(v)] for c in cols]
        mean = [sum(v) / len(v) if v else math.nan for v in vals]
        ax.fill_between(xs, lo, hi, alpha=0.25, label=f"min-max over {len(urls)} servers")
        ax.plot(xs, mean, lw=1.5, label="mean per server")
    ax.set_ylabel(label)
    return True


def _legend(ax: Axes) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="upper left", ncol=2 if len(handles) > 6 else 1)


def throughput(data: RunData) -> bytes | None:
    scale, xlabel = _scale(data.times)
    xs = [t / scale for t in data.times]
    fig, (ax,) = _figure()
    drew = _per_server(ax, data, "decode_tok_s", xs, "output tokens/s")
    if _has(data.client["decode_tok_s"]):
        ax.plot(xs, data.client["decode_tok_s"], color="black", lw=2, label="fleet decode (servers)")
        drew = True
    if _has(data.client["client_tok_s"]):
        ax.plot(xs, data.client["client_tok_s"], color="black", lw=1.5, ls=":", label="client-effective")
        drew = True
    if not drew:
        return None
    ax.set_title("Output tokens/s: aggregate and per server")
    ax.set_xlabel(xlabel)
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _png(fig)


def _simple(data: RunData, key: str, title: str, ylabel: str, dashed: str | None = None) -> bytes | None:
    scale, xlabel = _scale(data.times)
    xs = [t / scale for t in data.times]
    fig, (ax,) = _figure()
    if not _per_server(ax, data, key, xs, ylabel, dashed):
        return None
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _png(fig)


def running(data: RunData) -> bytes | None:
    return _simple(data, "running", "Running requests (solid) vs max running (dashed)", "requests", "max_running")


def queue(data: RunData) -> bytes | None:
    return _simple(data, "queued", "Server queue (waiting requests)", "requests")


def pools(data: RunData) -> bytes | None:
    has_state = any(_has(s["state_usage"]) for s in data.servers.values())
    has_kv = any(_has(s["kv_usage"]) for s in data.servers.values())
    if not has_kv and not has_state:
        return None
    scale, xlabel = _scale(data.times)
    xs = [t / scale for t in data.times]
    fig, axes = _figure(2 if has_state else 1)
    titles = ("KV pool usage", "State (Mamba) pool usage")
    for ax, key, title in zip(axes, ("kv_usage", "state_usage"), titles, strict=False):
        _per_server(ax, data, key, xs, "fraction used")
        ax.set_ylim(0, 1.05)
        ax.axhline(0.9, color="red", lw=0.8, ls="--")
        ax.set_title(title)
        _legend(ax)
    axes[-1].set_xlabel(xlabel)
    return _png(fig)


def completions(data: RunData) -> bytes | None:
    if not _has(data.client["comp_s"]):
        return None
    scale, xlabel = _scale(data.times)
    xs = [t / scale for t in data.times]
    fig, (ax,) = _figure()
    ax.plot(xs, data.client["comp_s"], color="C0", lw=1.5)
    ax.set_title("Completions per second (client)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("completions/s")
    ax.set_ylim(bottom=0)
    return _png(fig)


def failures(data: RunData) -> bytes | None:
    if not _has(data.client["failed"]):
        return None
    scale, xlabel = _scale(data.times)
    xs = [t / scale for t in data.times]
    fig, (ax,) = _figure()
    ax.plot(xs, data.client["failed"], color="C3", lw=1.5, label="failed prompts (this run, cumulative)")
    ax.plot(xs, data.client["retries"], color="C1", lw=1, ls="--", label="retried attempts (cumulative)")
    ax.set_title("Failures and retries over time")
    ax.set_xlabel(xlabel)
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _png(fig)


def output_lengths(data: RunData) -> bytes | None:
    raw = ((data.last_tick or {}).get("client") or {}).get("output_len")
    if not raw:
        return None
    hist = Histogram.from_dict(raw)
    if not hist.count:
        return None
    labels = [f"<={int(b)}" for b in hist.bounds] + [f">{int(hist.bounds[-1])}"]
    counts = hist.counts
    last = max(i for i, c in enumerate(counts) if c) + 1
    first = min(i for i, c in enumerate(counts) if c)
    fig, (ax,) = _figure()
    ax.bar(range(first, last), counts[first:last], color="C2")
    ax.set_xticks(range(first, last), labels[first:last], rotation=45, fontsize=8)
    mean = hist.mean() or 0.0
    ax.set_title(f"Output length per completion (tokens; mean {mean:,.0f}, {hist.count:,} completions)")
    ax.set_ylabel("completions")
    return _png(fig)


def finish_reasons(data: RunData) -> bytes | None:
    reasons = ((data.last_tick or {}).get("client") or {}).get("finish_reasons") or {}
    if not reasons:
        return None
    items = sorted(reasons.items(), key=lambda kv: kv[1])
    fig = Figure(figsize=(WIDTH, max(1.6, 0.45 * len(items) + 1.0)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    total = sum(reasons.values())
    ax.barh([k for k, _ in items], [v for _, v in items], color="C4")
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:,} ({v / total:.0%})", va="center", fontsize=8)
    ax.set_title("Finish reasons (this run)")
    ax.set_xlabel("completions")
    return _png(fig)


FIGURES = (
    ("throughput", "Output tokens/s", throughput),
    ("running", "Running vs max running", running),
    ("pools", "KV vs state pool usage", pools),
    ("queue", "Server queues", queue),
    ("completions", "Completions per second", completions),
    ("output_lengths", "Output lengths", output_lengths),
    ("finish_reasons", "Finish reasons", finish_reasons),
    ("failures", "Failures over time", failures),
)
