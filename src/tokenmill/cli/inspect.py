"""``tokenmill inspect``."""

from __future__ import annotations

import click
import orjson


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
    "tokenizer's chat template and say what share of them differ from the server's ids, and where (instead "
    "of the quality report).",
)
@click.option(
    "--tokenizer",
    metavar="DIR",
    help="--tokens: the model's tokenizer directory (default: the job's `tokenizer`).",
)
def inspect_cmd(
    target: str, examples: int, as_json: bool, train_max_length: int | None, tokens: bool, tokenizer: str | None
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
        tokenmill inspect OUT --tokens --tokenizer MODEL_DIR   # server ids vs the chat template
    """
    from tokenmill.quality.corpus import inspect_output

    if tokens:
        from tokenmill.tokens import check_corpus

        trip = check_corpus(target, tokenizer, examples)
        if as_json:
            click.echo(orjson.dumps(trip.as_dict(), option=orjson.OPT_INDENT_2).decode())
        else:
            click.echo(trip.render())
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
