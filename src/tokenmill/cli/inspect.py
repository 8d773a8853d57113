"""``tokenmill inspect``."""

from __future__ import annotations

import click
import orjson

from tokenmill.config import ExportSpec
from tokenmill.errors import ConfigError


@click.command(name="inspect")
@click.argument("target", metavar="OUT | PREFIX")
@click.option("--examples", default=5, show_default=True, help="Worst examples shown per signal.")
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@click.option(
    "--train-max-length",
    type=click.IntRange(min=1),
    help="A trainer's maximum sequence length: say what share of records and of tokens (prompt + answer, all "
    "turns) it would cut.",
)
@click.option(
    "--tokens",
    "tokens",
    is_flag=True,
    help="The chat template round trip: render each answer with server token ids (save_token_ids) through the "
    "tokenizer's chat template and say what share of them differ from the server's ids, and where, and how "
    "far every record's rendered token counts are from the servers' own (instead of the quality report).",
)
@click.option(
    "--tokenizer",
    metavar="DIR",
    help="--tokens: the model's tokenizer directory (default: the job's `tokenizer`).",
)
@click.option(
    "--max-disagree",
    type=click.FloatRange(0, 1),
    default=ExportSpec().usage_max_disagree,
    show_default=True,
    help="--tokens: a tokenizer whose counts disagree with the servers' usage counts on more than this share of "
    "the records is named in a warning (an error with --strict).",
)
@click.option(
    "--strict", is_flag=True, help="--tokens: exit 2 when the tokenizer disagrees with the servers' token counts."
)
def inspect_cmd(
    target: str,
    examples: int,
    as_json: bool,
    train_max_length: int | None,
    tokens: bool,
    tokenizer: str | None,
    max_disagree: float,
    strict: bool,
) -> None:
    """Show how much of OUT's corpus is degenerate, before anyone trains on it.

    Counts and rates per signal (truncated, empty, no_answer: reasoning without a final answer, repetition: a
    loop at the answer's end, think_markers: <think> markers left in the answer, duplicate: an answer another
    prompt already got, degenerate: any of repetition, empty or no_answer), output lengths per finish
    reason, the worst examples with their ids and the part of the answer that shows the problem. Works on a
    run in progress. Reads every live record wherever it is: OUT's shards, and those that live at the job's
    output.remote only (offloaded, taken over, other partitions'); given the job's remote PREFIX (s3://...,
    credentials from the environment as for the run) it reads the job from the prefix alone, from any machine.

    \b
    Then:
        tokenmill export OUT --format sharegpt --drop degenerate,duplicate
        tokenmill regenerate JOB.yaml --where repetition,empty --sampling seed=1
        tokenmill inspect OUT --tokens --tokenizer MODEL_DIR   # server ids and counts vs the chat template
    """
    from tokenmill.quality.corpus import inspect_output

    if tokens:
        _round_trip(target, tokenizer, examples, max_disagree, as_json, strict)
        return
    result = inspect_output(target, examples)
    cut = result.train_cut(train_max_length) if train_max_length is not None else None
    if as_json:
        data = result.as_dict()
        if cut is not None:
            data["train_cut"] = cut.as_dict()
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(result.render())
        if cut is not None:
            click.echo("\n" + cut.render())


def _round_trip(
    target: str, tokenizer: str | None, examples: int, max_disagree: float, as_json: bool, strict: bool
) -> None:
    from tokenmill.export.roundtrip import check_corpus

    trip = check_corpus(target, tokenizer, examples, max_disagree)
    if as_json:
        click.echo(orjson.dumps(trip.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(trip.render())
    if trip.usage is not None and trip.usage.disagrees:
        if strict:
            raise ConfigError(f"{trip.usage.warning()} (--strict)")
        click.echo(f"warning: {trip.usage.warning()}", err=True)
