"""``tokenmill run`` and ``tokenmill retry-failed``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tokenmill.cli.fleet import fleet_run_options
from tokenmill.cli.options import field_option
from tokenmill.config import JobSpec, load_job
from tokenmill.logs import setup_logging

if TYPE_CHECKING:
    from tokenmill.autotune.loop import Autotuner
    from tokenmill.run.target import RunTarget


# option -> the job field it overrides; each option takes what the job file takes there (see JobSpec)
OVERRIDES = {
    "servers": "servers",
    "output": "output.dir",
    "concurrency": "concurrency",
    "limit": "input.limit",
    "offset": "input.offset",
    "api": "api",
    "model": "model",
    "max_tokens": "sampling.max_tokens",
    "on_bad_row": "input.on_bad_row",
    "metrics_port": "monitor.metrics_port",
    "compare_gpu": "monitor.compare_gpu",
}
_SHORT = {"servers": ("-s", "servers"), "output": ("-o", "output")}  # as every command spells them (cli/options.py)
_HELP = {
    "servers": "Server base URL (repeat); replaces the job's list.",
    "output": "Output directory (another one than the file's: a trial run).",
    "limit": "Read at most this many rows (a trial run).",
    "offset": "Skip this many rows first (a trial run).",
    "api": "The API requests are sent to.",
}


def _overrides(**given: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key in OVERRIDES.items():
        value = given.get(name)
        if value is None or value == ():
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def job_options(fn: Any) -> Any:
    """The common-field overrides shared by run and retry-failed: one option per field of :data:`OVERRIDES`, typed
    and described by the field, then the run's own switches."""
    options = [
        field_option(JobSpec, key, f"--{name.replace('_', '-')}", *_SHORT.get(name, ()), help=_HELP.get(name))
        for name, key in OVERRIDES.items()
    ]  # fmt: skip
    options += [
        click.option(
            "--allow-changed-job",
            is_flag=True,
            help="Carry on in an output (and prefix) whose job differs in how completions are made (api, model, "
            "sampling, thinking, save_token_ids, the row-to-prompt mapping); never another input (input.path / "
            "input.hf, input.id_field, samples).",
        ),
        click.option(
            "--allow-existing-prefix",
            is_flag=True,
            help="Upload to an output.remote prefix that already holds other objects (none is ever overwritten).",
        ),
        click.option("--live/--no-live", default=None, help="Force the live display on or off."),
        click.option("--log-level", default="INFO", show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def execute(
    job: JobSpec,
    allow_changed_job: bool,
    live: bool | None,
    log_level: str,
    allow_existing_prefix: bool = False,
    partition: tuple[int, int] | None = None,
    repair_remote: bool = False,
    tuner: Autotuner | None = None,
    target: RunTarget | None = None,
    reopen: str | None = None,
) -> None:
    """Run a job (or one partition of it) and print its summary; exit 0 when finished (and uploaded), 3 when there
    is more to do. ``target``: where it writes (None: the job as it is); ``reopen``: why it may add to a job its
    prefix marks finished."""
    from tokenmill.output import layout
    from tokenmill.run.runner import run_job, run_sync

    log_name = layout.Names(partition[0] if partition is not None else None).log
    setup_logging(log_level, Path(job.output.dir) / log_name)
    result = run_sync(
        run_job(
            job,
            allow_changed_job=allow_changed_job,
            allow_existing_prefix=allow_existing_prefix,
            live=live,
            partition=partition,
            repair_remote=repair_remote,
            tuner=tuner,
            target=target,
            reopen=reopen,
        )
    )
    click.echo(result.summary.markdown())
    if not result.finished:
        click.echo("stopped before the end: rerun the same command to resume.", err=True)
        sys.exit(3)
    if result.upload is not None and not result.upload.complete:
        sys.exit(3)


def execute_partitions(
    job: JobSpec, count: int, ray_address: str, allow_changed_job: bool, reopen: str | None = None
) -> None:
    """``run --partitions``: run them, print one line each and the combined check; exit 3 if any stopped."""
    from tokenmill.output import verify
    from tokenmill.run.partitions import run_partitions

    results = run_partitions(job, count, ray_address, allow_changed_job, reopen)
    for r in results:
        state = "finished" if r.finished else f"stopped ({r.error})" if r.error else "stopped"
        click.echo(
            f"partition {r.index}/{count}: {state}; {r.completed:,} completed, {r.failed:,} failed, "
            f"{r.retries:,} retries in {r.elapsed_s:.1f} s"
        )
    if job.output.remote:  # the partitions' directories are on their nodes: the whole job is at the prefix
        from tokenmill.storage.audit import audit_prefix
        from tokenmill.storage.store import Store

        report = audit_prefix(Store(job.output.remote, job.output.storage_options))
    else:
        report = verify(Path(job.output.dir))
    click.echo(report.render())
    if not all(r.finished for r in results) or not report.ok:
        click.echo("stopped before the end: rerun the same command to resume.", err=True)
        sys.exit(3)


@click.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@job_options
@fleet_run_options
@click.option(
    "--partition",
    "partition_text",
    metavar="I/N",
    help="Run partition I of N of the input here (0-based), e.g. one task of a Slurm array or a Kubernetes "
    "indexed job: slurm/N or slurm takes I (and N) from SLURM_ARRAY_TASK_ID (and SLURM_ARRAY_TASK_COUNT), k8s/N "
    "takes I from JOB_COMPLETION_INDEX. Each partition may write to its own local directory; with output.remote "
    "they share the prefix.",
)
@click.option(
    "--remote",
    "remote_url",
    metavar="URL",
    help="Upload to this prefix instead of output.remote: a trial run's prefix of its own (it gets its own "
    "_SUCCESS there).",
)
@click.option(
    "--upload",
    is_flag=True,
    help="Upload a trial run to the job's output.remote after all, e.g. -o a fresh directory that carries the job "
    "on (with --limit/--offset it never writes the prefix's _SUCCESS: the run of the whole input does).",
)
@click.option(
    "--reopen",
    is_flag=True,
    help="Add to a job whose prefix already holds its _SUCCESS (its input grew since): _SUCCESS is withdrawn, "
    "with a warning and an event, until the job is done again. Without it such a run stops before generating.",
)
@click.option(
    "--repair-remote",
    is_flag=True,
    help="When output.remote disagrees with itself (a listed shard missing or changed, an id in two shards), make "
    "its manifests match the objects (objects that disagree are moved to _tokenmill/aside/, never deleted) and "
    "carry on; the prompts concerned are generated again. Only while no other run writes to the prefix.",
)
def run(
    job_file: str,
    allow_changed_job: bool,
    allow_existing_prefix: bool,
    live: bool | None,
    log_level: str,
    partition_text: str | None,
    repair_remote: bool,
    remote_url: str | None,
    upload: bool,
    reopen: bool,
    **fields: Any,
) -> None:
    """Generate a completion for every prompt of JOB_FILE, exactly once.

    Rerun the same command after any interruption: the output directory is the record of what is done,
    and the run carries on from there. With output.remote, the remote prefix is the durable record: a fresh
    machine (or one that lost its disk) takes what is done over from it, and _SUCCESS is written there once,
    when the whole job is done.

    A trial run (--limit/--offset other than the job file's, or -o another directory than its output.dir)
    never touches output.remote: no claim, no shard, no _SUCCESS. --remote URL uploads it to a prefix of its
    own; --upload to the job's prefix. The first log line says where the run writes.

    \b
    Example:
        tokenmill run job.yaml --limit 100 -o trial/  # a trial: local only
        tokenmill run job.yaml --limit 100 -o trial/ --remote s3://bucket/trials/t1/
        tokenmill run job.yaml --fleet fleet.yaml     # start the servers, run, stop them
        tokenmill run job.yaml --partition slurm/16   # one task of a 16-task Slurm array
    """
    import os

    from tokenmill.errors import ConfigError
    from tokenmill.run.with_fleet import FleetLaunch
    from tokenmill.sources.partition import parse_partition

    launch = FleetLaunch.pop_options(fields)
    partition = parse_partition(partition_text, os.environ) if partition_text else None
    if partition is not None and launch.partitions > 1:
        raise ConfigError("give --partition I/N (one partition here) or --partitions N (all of them on Ray), not both")
    job = load_job(job_file, {**_overrides(**fields), **launch.job_overrides()})
    target = _run_target(job, job_file, remote_url, upload, launch.partitions)
    why = "--reopen" if reopen else None
    launch.run(
        job,
        lambda job, tuner: execute(
            job,
            allow_changed_job,
            live,
            log_level,
            allow_existing_prefix,
            partition,
            repair_remote,
            tuner,
            target=target,
            reopen=why,
        ),
        lambda job, count, address: execute_partitions(target.apply(job), count, address, allow_changed_job, why),
    )


def _run_target(job: JobSpec, job_file: str, remote_url: str | None, upload: bool, partitions: int) -> RunTarget:
    """Where ``run`` writes (:func:`tokenmill.run.target.decide_target`); an ``--upload`` of a trial is for one
    client, never ``--partitions``."""
    from tokenmill.errors import ConfigError
    from tokenmill.run.target import AsWritten, decide_target

    target = decide_target(job, AsWritten.read(job_file), remote=remote_url, upload=upload)
    if partitions > 1 and not target.success:
        raise ConfigError(
            "--upload of a run with --limit/--offset is for one client: drop --partitions, or --upload (the trial "
            "then stays local), or give --remote URL (a prefix of the trial's own)"
        )
    return target


@click.command(name="retry-failed")
@click.argument("job_file", type=click.Path(dir_okay=False))
@job_options
def retry_failed(
    job_file: str,
    allow_changed_job: bool,
    allow_existing_prefix: bool,
    live: bool | None,
    log_level: str,
    **fields: Any,
) -> None:
    """Re-queue the failed prompts of JOB_FILE's output and run them again.

    The current failed.jsonl is kept as failed.retry-N.jsonl; prompts that fail again are recorded anew. With
    output.remote, a job whose prefix holds its _SUCCESS is reopened for them: _SUCCESS is withdrawn (with a
    warning and an event) before the first new shard is uploaded, and written again at the end. With --limit,
    --offset or another -o it is a trial run, which never touches output.remote.
    """
    from tokenmill.output import OutputDir
    from tokenmill.run.target import AsWritten, decide_target

    job = load_job(job_file, _overrides(**fields))
    target = decide_target(job, AsWritten.read(job_file))
    archived = OutputDir(Path(job.output.dir), shard_size=job.output.shard_size).archive_failed()
    if archived is None:
        click.echo("no failed prompts to retry", err=True)
        return
    click.echo(f"failed records moved to {archived}; retrying them", err=True)
    execute(job, allow_changed_job, live, log_level, allow_existing_prefix, target=target, reopen="retry-failed")
