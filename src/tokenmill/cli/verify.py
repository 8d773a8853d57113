"""``tokenmill verify``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
import orjson

from tokenmill.records import Skip


def _input_ids(job_file: str, out: Path) -> Iterator[str | Skip]:
    from tokenmill.config import load_job
    from tokenmill.output.identity import job_with_ids
    from tokenmill.sources import iter_prompts

    job = job_with_ids(load_job(job_file), out)  # the ids the run used, as OUT/job.json records them
    # bad rows are reported by the check (as rows missing from skipped.jsonl), not raised
    spec = job.input.model_copy(update={"on_bad_row": "skip"})
    for item in iter_prompts(spec):
        yield item if isinstance(item, Skip) else item.id


@click.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--input",
    "job_file",
    type=click.Path(dir_okay=False),
    help="Job file whose input is read to check that every prompt is recorded exactly once.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="Also compare the sealed shards with the output.remote prefix (sizes, sha256 of every object, manifest).",
)
@click.option("--remote-url", help="The prefix to compare with, when it is not the one recorded in OUT/job.json.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify(out: Path, job_file: str | None, remote: bool, remote_url: str | None, as_json: bool) -> None:
    """Check the output directory OUT: every sealed shard against its manifest line (sha256, count, bytes),
    every line readable, no torn line, no id recorded twice. With --input JOB.yaml, also check that every
    input prompt is completed, failed or skipped exactly once, and that nothing else is there. With --remote,
    also check that the remote prefix holds every sealed shard, byte for byte, and nothing else of this job
    (credentials come from the environment, as in the run).

    Exits 0 when everything checks out, 1 when a problem was found.

    \b
    Example:
        tokenmill verify out/ --input job.yaml --remote
    """
    from tokenmill.output import verify as run_verify

    report = run_verify(out, _input_ids(job_file, out) if job_file else None)
    if remote or remote_url:
        from tokenmill.storage.store import Store
        from tokenmill.storage.verify import remote_target, verify_remote

        url, options, job_id = remote_target(out, remote_url)
        verify_remote(report, out, Store(url, options), job_id)
    if as_json:
        click.echo(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(report.render())
    sys.exit(0 if report.ok else 1)
