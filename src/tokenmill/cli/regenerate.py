"""``tokenmill regenerate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tokenmill.cli.run import _overrides, execute, job_options
from tokenmill.config import JobSpec, load_job
from tokenmill.quality.registry import selectors_help


@click.command(name="regenerate")
@click.argument("job_file", metavar="JOB_FILE|OUT", type=click.Path())
@click.option(
    "--where",
    metavar="SIGNALS",
    help=f"Which answers to replace, comma-separated: {selectors_help()}. Not needed to finish an interrupted round.",
)
@click.option(
    "--sampling",
    "sampling",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a sampling parameter for these prompts (repeat): seed=1, temperature=0.6, "
    "frequency_penalty=0.3, repetition_penalty=1.1, ...",
)
@click.option("--dry-run", is_flag=True, help="Say how many prompts would be answered again, and stop.")
@job_options
def regenerate(
    job_file: str,
    where: str | None,
    sampling: tuple[str, ...],
    dry_run: bool,
    allow_changed_job: bool,
    allow_existing_prefix: bool,
    live: bool | None,
    log_level: str,
    **fields: Any,
) -> None:
    """Answer again the prompts of JOB_FILE's output (or of OUT, the job its job.json records) whose answers
    show the chosen signals.

    The prompts (as they were sent) are answered once more, with the sampling changes given, as a round of
    their own in OUT/regenerate/round-NNN/; each new answer replaces the earlier one exactly once (the earlier
    record stays where it is, set aside: `inspect`, `export` and `verify` read the live answer only). A prompt
    whose new request fails keeps its earlier answer. Interrupted? Rerun the same command: the round carries
    on. Each later call starts a new round over the answers live then.

    \b
    Example:
        tokenmill inspect out/
        tokenmill regenerate job.yaml --where degenerate --sampling seed=1 --sampling frequency_penalty=0.3
        tokenmill regenerate out/ --where repetition,empty --servers http://10.0.0.5:30000
        tokenmill inspect out/
    """
    from tokenmill.quality.records import parse_selectors
    from tokenmill.quality.regenerate import parse_sampling

    if Path(job_file).is_dir():
        from tokenmill.output.identity import recorded_job

        job = recorded_job(Path(job_file), _overrides(**fields))
    else:
        job = load_job(job_file, _overrides(**fields))
    selectors = parse_selectors(where, "--where") if where else None
    regenerate_round(
        job, selectors, parse_sampling(sampling), dry_run, allow_changed_job, live, log_level, allow_existing_prefix
    )


def regenerate_round(
    job: JobSpec,
    selectors: tuple[str, ...] | None,
    changes: dict[str, Any],
    dry_run: bool = False,
    allow_changed_job: bool = False,
    live: bool | None = None,
    log_level: str = "INFO",
    allow_existing_prefix: bool = False,
) -> None:
    """Carry on with the output's unfinished round, or start one over the live answers that match ``selectors``;
    closes with how many live answers match the signals the round was chosen by, before and after it."""
    from tokenmill.output import rounds
    from tokenmill.output.lock import DirLock
    from tokenmill.quality.corpus import inspect_output
    from tokenmill.quality.regenerate import choose, closing_line, match_counts, round_job

    out = Path(job.output.dir)
    if not out.is_dir():
        raise click.ClickException(f"{out} does not exist: run the job first")
    lock = DirLock(out)
    lock.acquire()  # no run writes to OUT while its answers are chosen and replaced
    try:
        before = inspect_output(out)
        found = rounds.rounds(out)
        rnd = found[-1] if found and not found[-1].finished() else None
        if rnd is not None:
            answered, total = rnd.progress()
            click.echo(f"carrying on with {rnd.name}: {answered:,} of {total:,} prompts answered", err=True)
        else:
            if not selectors:
                raise click.UsageError("say which answers to replace with --where (e.g. --where degenerate)")
            rows, counts = choose(out, selectors)
            why = ", ".join(f"{n:,} {name}" for name, n in counts.most_common()) or "none"
            click.echo(
                f"{len(rows):,} of {before.records:,} answers match --where {','.join(selectors)} ({why})", err=True
            )
            if not rows or dry_run:
                return
            rnd = rounds.create(out, rows, {"where": list(selectors), "sampling": changes, "chosen": dict(counts)})
            click.echo(f"{rnd.name}: answering them again with {changes or 'the same sampling'}", err=True)
        header = rnd.header()
        regen_job = round_job(job, rnd, header.get("sampling") or {})
        execute(regen_job, allow_changed_job, live, log_level, allow_existing_prefix)
        chosen_by = tuple(header.get("where") or selectors or ())
        after = match_counts(out, chosen_by)
        click.echo(
            f"{closing_line(rnd.name, chosen_by, dict(header.get('chosen') or {}), after)}; "
            f"`tokenmill inspect {out}` shows the rest"
        )
    finally:
        lock.release()
