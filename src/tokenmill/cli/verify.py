"""``tokenmill verify``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from tokenmill.records import Skip

if TYPE_CHECKING:
    from tokenmill.output.identity import JobRecord


def _input_ids(job_file: str, out: Path | None, record: JobRecord | None = None) -> Iterator[str | Skip]:
    from tokenmill.config import load_job
    from tokenmill.output.identity import job_with_ids
    from tokenmill.sources import iter_prompts

    # the ids the run used, as OUT/job.json (or the remote prefix's claim) records them
    job = job_with_ids(load_job(job_file), out, record=record)
    # bad rows are reported by the check (as rows missing from skipped.jsonl), not raised
    spec = job.input.model_copy(update={"on_bad_row": "skip"})
    for item in iter_prompts(spec, samples=job.samples, seed=job.sampling.seed):
        yield item if isinstance(item, Skip) else item.id


def _verify_prefix(url: str | None, job_file: str | None) -> Any:
    """The whole job at a remote prefix: ``url``, or the job file's ``output.remote``."""
    from tokenmill.config import load_job
    from tokenmill.errors import ConfigError
    from tokenmill.storage.audit import audit_prefix
    from tokenmill.storage.prefix import read_claim
    from tokenmill.storage.store import Store

    options: dict[str, Any] = {}
    samples = 1
    if job_file:
        job = load_job(job_file)
        samples = job.samples
        if url is None or url.rstrip("/") == (job.output.remote or "").rstrip("/"):
            url, options = job.output.remote, dict(job.output.storage_options)
    if not url:
        raise ConfigError("no remote prefix to check: give one (s3://bucket/prefix/), or a job file with output.remote")
    store = Store(url, options)
    claimed = read_claim(store) if job_file else None
    from tokenmill.output.identity import JobRecord

    record = JobRecord.from_json(claimed[0].job) if claimed is not None and claimed[0].job is not None else None
    return audit_prefix(store, _input_ids(job_file, None, record) if job_file else None, samples)


@click.command()
@click.argument("target", required=False, metavar="[OUT | PREFIX]")
@click.option(
    "--input",
    "job_file",
    type=click.Path(dir_okay=False),
    help="Job file whose input is read to check that every prompt is recorded exactly once.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="Also compare the sealed shards with the output.remote prefix (sizes, sha256 of every object, manifest); "
    "without OUT, check the job file's remote prefix by itself.",
)
@click.option("--remote-url", help="The prefix to compare with, when it is not the one recorded in OUT/job.json.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify(target: str | None, job_file: str | None, remote: bool, remote_url: str | None, as_json: bool) -> None:
    """Check the output directory OUT: every sealed shard against its manifest line (sha256, count, bytes),
    every line readable, no torn line, no id recorded twice. With --input JOB.yaml, also check that every
    input prompt is completed, failed or skipped exactly once, and that nothing else is there. With --remote,
    also check that the remote prefix holds every sealed shard, byte for byte, and nothing else of this job
    (credentials come from the environment, as in the run).

    Given a remote PREFIX (s3://..., gs://, file://...) instead of OUT, or --remote with only --input, check the
    whole job there from the prefix alone, from any machine: every shard of every partition read back and
    hashed against its manifest, no id twice, _SUCCESS, and with --input every prompt exactly once.

    Exits 0 when everything checks out, 1 when a problem was found.

    \b
    Example:
        tokenmill verify out/ --input job.yaml --remote
        tokenmill verify s3://bucket/corpora/run-1/ --input job.yaml
    """
    from tokenmill.errors import ConfigError
    from tokenmill.storage.place import is_url

    if target is None or is_url(target):
        if target is None and not (remote and job_file):
            raise ConfigError("give the output directory OUT, a remote PREFIX, or --remote with --input JOB.yaml")
        report = _verify_prefix(target or remote_url, job_file)
    else:
        from tokenmill.config import load_job
        from tokenmill.output import verify as run_verify

        out = Path(target)
        samples = load_job(job_file).samples if job_file else 1
        report = run_verify(out, _input_ids(job_file, out) if job_file else None, samples)
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
