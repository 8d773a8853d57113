"""The report's corpus quality section: what ``tokenmill inspect`` shows, as tables and two figures (the rate of
each signal, and output lengths per finish reason)."""

from __future__ import annotations

import base64
from html import escape

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tokenmill.fmt import UNKNOWN
from tokenmill.quality.corpus import CorpusQuality
from tokenmill.report.plots import DPI, WIDTH, _figure, _png

LENGTH_BINS = 40


def signal_rates(q: CorpusQuality) -> bytes | None:
    if not q.records:
        return None
    rows = q.counts()
    fig = Figure(figsize=(WIDTH, 0.45 * len(rows) + 1.0), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    names = [name for name, _ in rows][::-1]
    rates = [100.0 * n / q.records for _, n in rows][::-1]
    colors = ["C3" if name == "degenerate" else "C0" for name in names]
    ax.barh(names, rates, color=colors)
    for i, (rate, (_, n)) in enumerate(zip(rates, rows[::-1], strict=True)):
        ax.text(rate, i, f" {rate:.2f}% ({n:,})", va="center", fontsize=8)
    ax.set_xlabel(f"share of {q.records:,} completions (%)")
    ax.set_title("Quality signals")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def lengths(q: CorpusQuality) -> bytes | None:
    series = {reason: list(ls.tokens) for reason, ls in sorted(q.lengths.items()) if len(ls.tokens)}
    if not series:
        return None
    top = max(max(v) for v in series.values())
    fig, (ax,) = _figure()
    bins = [top * i / LENGTH_BINS for i in range(LENGTH_BINS + 1)] if top else [0, 1]
    ax.hist(
        list(series.values()),
        bins=bins,
        stacked=True,
        label=list(series),
        color=["C2", "C1", "C4", "C5"][: len(series)],
    )
    ax.set_xlabel("completion tokens")
    ax.set_ylabel("completions")
    ax.set_title("Output length per finish reason (a spike at max_tokens: answers cut off, loops among them)")
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


FIGURES = (("quality_signals", "Quality signals", signal_rates), ("quality_lengths", "Output lengths", lengths))


def figures(q: CorpusQuality) -> list[tuple[str, str, bytes]]:
    out = []
    for name, title, draw in FIGURES:
        png = draw(q)
        if png is not None:
            out.append((name, title, png))
    return out


def _rate(q: CorpusQuality, n: int) -> str:
    rate = q.rate(n)
    return UNKNOWN if rate is None else f"{rate * 100:.2f}%"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def section(q: CorpusQuality, pngs: list[tuple[str, str, bytes]]) -> str:
    """The section's HTML (figures embedded)."""
    parts = [
        "<h2>Corpus quality</h2>",
        f"<p>{q.records:,} completions, {q.failed:,} failed. Degenerate: a loop at the answer's end, an empty "
        "answer, or reasoning without a final answer. Leave them out with <code>tokenmill export OUT --drop "
        "degenerate,duplicate</code>, or answer them again with <code>tokenmill regenerate JOB --where "
        "degenerate</code>.</p>",
        _table(["signal", "records", "rate"], [[escape(n), f"{c:,}", _rate(q, c)] for n, c in q.counts()]),
    ]
    rows = []
    for reason, ls in sorted(q.lengths.items()):
        s = ls.summary()
        rows.append([escape(reason)] + [f"{s.get(k, 0):,}" for k in ("count", "mean", "p50", "p90", "p99", "max")])
    if rows:
        parts.append(_table(["finish reason", "count", "mean", "p50", "p90", "p99", "max"], rows))
    for name, title, png in pngs:
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure id='{escape(name)}'><img alt='{escape(title)}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{escape(title)} ({escape(name)}.png alongside this file)</figcaption></figure>"
        )
    examples = [
        [escape(e.id), escape(name), escape(e.where), f"<small>{escape(' '.join(e.excerpt.split()))}</small>"]
        for name, worst in q.worst.items()
        for e in worst
    ]
    if examples:
        parts += ["<h3>Worst examples</h3>", _table(["id", "signal", "where", "excerpt"], examples)]
    groups = [(h, n) for h, n in q.duplicate_sizes.most_common(5) if n > 1]
    if groups:
        dup_rows = [[f"{n:,}", escape(", ".join(q.duplicate_groups[h]))] for h, n in groups]
        parts += ["<h3>Answers given to more than one prompt</h3>", _table(["records", "ids (first few)"], dup_rows)]
    return "\n".join(parts)
