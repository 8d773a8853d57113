"""``tokenmill report``: the event log of an output directory as one self-contained HTML page with plots.

``build_report(out)`` writes ``OUT/report.html`` (figures embedded) and the same figures as PNG files in
``OUT/report/``. The run's story comes from ``events.jsonl`` and ``summary.json``; the corpus quality section
reads the shards once (``quality=False`` leaves it out).
"""

from __future__ import annotations

from pathlib import Path

from tokenmill.errors import OutputError
from tokenmill.fsio import atomic_write
from tokenmill.output import layout
from tokenmill.quality.corpus import CorpusQuality, inspect_output
from tokenmill.report.data import MAX_POINTS, RunData, load
from tokenmill.report.html import render
from tokenmill.report.plots import FIGURES
from tokenmill.report.quality import figures as corpus_figures
from tokenmill.report.quality import section

__all__ = ["RunData", "build_report", "load"]


def build_report(
    out: Path,
    dest: Path | None = None,
    max_points: int = MAX_POINTS,
    quality: bool = True,
    corpus: CorpusQuality | None = None,
) -> Path:
    """Write the report of ``out`` to ``dest`` (default ``OUT/report.html``); returns its path. The quality
    section is ``corpus`` when given (read elsewhere, e.g. from a remote prefix), else read from ``out``."""
    data = load(out, max_points=max_points)
    quality_html, quality_pngs = "", []
    if quality:
        corpus = corpus if corpus is not None else inspect_output(out)
        quality_pngs = corpus_figures(corpus)
        quality_html = section(corpus, quality_pngs)
    html_path = dest or out / layout.REPORT
    png_dir = html_path.parent / html_path.stem
    figures: list[tuple[str, str, bytes]] = []
    for name, title, draw in FIGURES:
        png = draw(data)
        if png is not None:
            figures.append((name, title, png))
    try:
        png_dir.mkdir(parents=True, exist_ok=True)
        for name, _, png in [*figures, *quality_pngs]:
            (png_dir / f"{name}.png").write_bytes(png)
        atomic_write(html_path, render(data, figures, quality_html).encode("utf-8"))
    except OSError as exc:
        raise OutputError(f"cannot write the report to {html_path}: {exc.strerror or exc}") from exc
    return html_path
