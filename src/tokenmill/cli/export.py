"""``tokenmill export``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from tokenmill.cli.options import renamed
from tokenmill.config import ExportSpec
from tokenmill.errors import ConfigError, OutputError
from tokenmill.export import NAMES, ExportCounts, ExportOptions, counts_path, export, format_of
from tokenmill.quality.registry import selectors_help
from tokenmill.storage.destination import RemoteFile, is_url

_SPEC = ExportSpec.model_fields


def _lower(text: str | None) -> str:
    return (text or "")[:1].lower() + (text or "")[1:]


@click.command(name="export")
@click.argument("target", metavar="OUT | PREFIX")
@click.option("--format", "fmt", type=click.Choice(NAMES), required=True, help="What to write (docs/quality.md).")
@click.option(
    "--to",
    "dest",
    metavar="PATH | URL",
    help="Where: a local path, or a URL (s3://bucket/train.jsonl, file:///srv/x.jsonl; one ending in / gets the "
    "default name), written through the store (default: OUT/export.<format>.<ext>; for a PREFIX, "
    "export.<format>.<ext> here).",
)
@renamed(("--output", "-o"), "--to", "dest")
@click.option("--reasoning", type=click.Choice(["keep", "drop"]), default="keep", show_default=True)
@click.option(
    "--drop",
    "drop",
    default="",
    metavar="SIGNALS",
    help=f"Leave out records with these quality signals, comma-separated: {selectors_help()}. See `tokenmill inspect`.",
)
@click.option("--drop-truncated", is_flag=True, help="Same as --drop truncated.")
@click.option("--min-completion-tokens", type=int, help="Leave out completions with fewer completion tokens.")
@renamed("--min-tokens", "--min-completion-tokens", "min_completion_tokens", type=int)
@click.option("--max-completion-tokens", type=int, help="Leave out completions with more completion tokens.")
@renamed("--max-tokens", "--max-completion-tokens", "max_completion_tokens", type=int)
@click.option("--no-token-ids", is_flag=True, help="Do not write captured token ids.")
@click.option(
    "--keep-fields",
    default="",
    metavar="NAMES",
    help="The input's own columns to carry into each row, comma-separated (e.g. label,source), or 'all'; the run "
    "records them (input.keep_fields, by default every column but the prompt and the id).",
)
@click.option(
    "--samples",
    type=click.Choice(["answers", "grouped"]),
    default="answers",
    show_default=True,
    help="A job with samples: N: one row per answer (id {id}_gen{k}, with primary_id and sample), or grouped: one "
    "row per prompt with its answers in a list (JSON lines formats).",
)
@click.option("--allow-empty", is_flag=True, help="Write an empty export instead of failing when no record is left.")
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    help="--format tokens: the model's tokenizer directory (default: the job's `tokenizer`); renders records "
    "without server token ids through its chat template.",
)
@click.option("--per-turn", is_flag=True, help="--format tokens: one row per assistant turn ({id}_turn{k}).")
@click.option(
    "--max-length", type=click.IntRange(min=1), help="--format tokens: cut rows to N tokens (counted in the counts)."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="--format tokens: processes that build the rows (default: one a core this process may run on); the rows "
    "are the same, in the same order, for any number.",
)
@click.option(
    "--max-disagree",
    type=click.FloatRange(0, 1),
    default=ExportSpec().usage_max_disagree,
    show_default=True,
    help=f"--format tokens: {_lower(_SPEC['usage_max_disagree'].description)}.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="--format tokens: fail (exit 2, nothing written) when the tokenizer disagrees with the servers' token counts.",
)
def export_cmd(
    target: str,
    fmt: str,
    dest: str | None,
    no_token_ids: bool,
    drop: str,
    drop_truncated: bool,
    keep_fields: str,
    tokenizer: Path | None,
    per_turn: bool,
    max_length: int | None,
    workers: int | None,
    max_disagree: float,
    **kw: Any,
) -> None:
    """Write the job's completions as training data: the conversation with the generated assistant turn(s).

    Reads every live record of the job wherever it is: OUT's shards, and from the job's output.remote (with the
    credentials in the environment, as for the run) the shards that live there only (offloaded after upload,
    taken over by a fresh machine, other partitions'); given the remote PREFIX (s3://..., file://...) it reads the
    job from the prefix alone, from any machine. A prompt answered again by `tokenmill regenerate` is exported
    with its latest answer. Prints (and writes to DEST.counts.json) how many records the job completed, how many
    were written and why any were left out; a completed record that cannot be read fails the export (exit 2),
    and so does an export of nothing unless --allow-empty. `--format tokens` runs on every core (--workers) and
    compares the rendered token counts with the servers' own: a tokenizer that is not the model's is named in a
    warning (an error with --strict).

    \b
    Example:
        tokenmill export out/ --format specforge --to train.jsonl --drop degenerate,duplicate
        tokenmill export s3://bucket/corpora/run-1/ --format sharegpt --to train.jsonl
        tokenmill export out/ --format specforge --to s3://bucket/train/   # export.specforge.jsonl there
        tokenmill export out/ --format tokens --max-length 4096 --to prompts.jsonl   # input_ids + loss_mask
    """
    from tokenmill.export.parallel import cores
    from tokenmill.export.tokens import TokenOptions

    selectors = _selectors(drop, drop_truncated)
    name = format_of(fmt).default_name
    keep = _kept_fields(keep_fields)
    tokens = TokenOptions(str(tokenizer) if tokenizer else None, per_turn, max_length, max_disagree)
    opts = ExportOptions(
        format=fmt,
        token_ids=not no_token_ids,
        drop=selectors,
        keep_fields=keep,  # type: ignore[arg-type]
        tokens=tokens,
        workers=workers or cores(),
        **kw,
    )
    if dest is not None and is_url(dest):
        counts = _export_to_url(target, RemoteFile.parse(dest, name), opts)
    else:
        where = Path(dest) if dest else (Path(name) if is_url(target) else Path(target) / name)
        counts = export(target, where, opts)
        click.echo(f"{where}: {counts.render()}\ncounts in {counts_path(where)}")
    if counts.tokens is not None and counts.tokens.usage.disagrees:
        click.echo(f"warning: {counts.tokens.usage.warning()}", err=True)


def _selectors(drop: str, drop_truncated: bool) -> tuple[str, ...]:
    """The ``--drop`` selectors, ``truncated`` first with ``--drop-truncated``."""
    from tokenmill.quality.records import parse_selectors

    selectors = parse_selectors(drop, "--drop") if drop else ()
    if drop_truncated and "truncated" not in selectors:
        selectors = ("truncated", *selectors)
    return selectors


def _kept_fields(keep_fields: str) -> tuple[str, ...] | str:
    """``--keep-fields``: ``all``, or the names given (comma-separated; none for an empty list)."""
    return "all" if keep_fields.strip() == "all" else tuple(f.strip() for f in keep_fields.split(",") if f.strip())


def _export_to_url(target: str, dest: RemoteFile, opts: ExportOptions) -> ExportCounts:
    """The export made in a local temporary directory, then written to the URL through the store: the file, then
    its counts beside it (a failed export writes nothing there)."""
    if opts.format == "hf":
        raise ConfigError(
            f"--to {dest.url}: --format hf writes a dataset directory, not one file; export --format parquet to the "
            "URL (datasets reads it: load_dataset('parquet', data_files=URL)), or hf to a local directory"
        )
    counts_file = RemoteFile(dest.prefix, counts_path(Path(dest.name)).name)
    with tempfile.TemporaryDirectory(prefix="tokenmill-export-") as tmp:
        local = Path(tmp) / dest.name
        try:
            counts = export(target, local, opts)
        except (ConfigError, OutputError) as exc:  # name the URL asked for, not the local staging file
            raise type(exc)(str(exc).replace(str(local), dest.url)) from exc
        dest.publish(local)
        counts_file.publish(counts_path(local))
    click.echo(f"{dest.url}: {counts.render()}\ncounts in {counts_file.url}")
    return counts
