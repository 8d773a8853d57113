"""``tokenmill report``: the run report of an output directory, as one HTML page with plots."""

from __future__ import annotations

from pathlib import Path

import click

from tokenmill.cli.options import renamed
from tokenmill.output import layout
from tokenmill.report.data import MAX_POINTS


@click.command()
@click.argument("out", metavar="OUT | PREFIX")
@click.option(
    "--to",
    "dest",
    type=click.Path(dir_okay=False),
    help="HTML file to write (default: OUT/report.html; for a PREFIX, report.html here).",
)
@renamed(("--output", "-o"), "--to", "dest", type=click.Path(dir_okay=False))
@click.option(
    "--max-points", default=MAX_POINTS, show_default=True, help="Most snapshots plotted (long runs are thinned)."
)
@click.option("--no-quality", is_flag=True, help="Leave out the corpus quality section (it reads every shard once).")
def report(out: str, dest: str | None, max_points: int, no_quality: bool) -> None:
    """Build a self-contained HTML report of the run(s) in OUT from its event log.

    Plots throughput (aggregate and per server), running vs max running, KV vs state pool usage, queues,
    completions/s, output lengths, finish reasons and failures over time, with the summary table and the
    doctor's verdicts; then the corpus quality (what `tokenmill inspect` shows: signal rates, output lengths
    per finish reason, the worst examples, duplicates). The figures are also written as PNG files next to
    the page.

    Given the job's remote PREFIX (s3://..., credentials in the environment as for the run), the report covers the
    whole job (every partition) from the prefix alone, from any machine; the quality section reads the uploaded
    shards.

    \b
    Example:
        tokenmill report tokenmill-demo && xdg-open tokenmill-demo/report.html
        tokenmill report s3://bucket/corpora/run-1/ --to run-1.html
    """
    from tokenmill.quality.corpus import inspect_output
    from tokenmill.report import build_report
    from tokenmill.storage.place import open_place, records_dir

    place = open_place(out)
    with records_dir(place) as view:
        if place.remote:
            target = Path(dest or layout.REPORT).absolute()
            corpus = None if no_quality else inspect_output(out)
            path = build_report(view.root, target, max_points, quality=not no_quality, corpus=corpus)
        else:
            path = build_report(view.root, Path(dest) if dest else None, max_points, quality=not no_quality)
    click.echo(f"report written to {path} (figures as PNG in {path.parent / path.stem})")
