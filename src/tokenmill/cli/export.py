"""``tokenmill export``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tokenmill.export import FORMATS, ExportOptions, export


@click.command(name="export")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="What to write.")
@click.option("--output", "-o", "dest", type=click.Path(path_type=Path), help="Where (default: OUT/export.<ext>).")
@click.option("--reasoning", type=click.Choice(["keep", "drop"]), default="keep", show_default=True)
@click.option(
    "--drop",
    "drop",
    default="",
    metavar="SIGNALS",
    help="Leave out records with these quality signals, comma-separated: truncated, empty, no_answer, repetition, "
    "degenerate (any of the last three), duplicate (later copies of an answer). See `tokenmill inspect`.",
)
@click.option("--drop-truncated", is_flag=True, help="Same as --drop truncated.")
@click.option("--min-tokens", type=int, help="Leave out completions with fewer completion tokens.")
@click.option("--max-tokens", type=int, help="Leave out completions with more completion tokens.")
@click.option("--no-token-ids", is_flag=True, help="Do not write captured token ids.")
def export_cmd(
    out: Path, fmt: str, dest: Path | None, no_token_ids: bool, drop: str, drop_truncated: bool, **kw: Any
) -> None:
    """Write OUT's completions as training data: the conversation with the generated assistant turn(s).

    \b
    Example:
        tokenmill export out/ --format specforge -o train.jsonl --drop degenerate,duplicate
    """
    from tokenmill.quality.corpus import parse_selectors

    selectors = parse_selectors(drop, "--drop") if drop else ()
    if drop_truncated and "truncated" not in selectors:
        selectors = ("truncated", *selectors)
    ext = {"parquet": "parquet", "hf": "hf"}.get(fmt, "jsonl")
    target = dest or out / f"export.{fmt}.{ext}"
    opts = ExportOptions(format=fmt, token_ids=not no_token_ids, drop=selectors, **kw)  # type: ignore[arg-type]
    counts = export(out, target, opts)
    click.echo(f"wrote {target}\n{counts.render()}")
