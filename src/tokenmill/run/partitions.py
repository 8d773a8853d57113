"""``run --partitions N``: N clients as Ray tasks, each owning a disjoint, deterministic part of the input.

A prompt belongs to one partition (by whole input files, or ``blake2b(id) mod N``; see
:mod:`tokenmill.sources.partition`): stable across runs and machines, so a resume finds each id where it expects
it, whatever N was before (every writer's done set holds what all partitions recorded). Partition P writes its
own files (``completions_pPPP_*.jsonl``, ``manifest.pPPP.jsonl``, ... see :mod:`tokenmill.output.layout`).

- With ``output.remote``, each client writes to ``output.dir`` on the node it runs on (its own local directory;
  clients on one node share it) and uploads to the shared prefix; they share the job's claim, the last one to
  finish writes ``_SUCCESS``, and the driver checks the whole job at the prefix
  (:mod:`tokenmill.storage.audit`). No shared filesystem is needed.
- Without it, the output directory must be on storage every node sees; ``tokenmill verify`` checks every
  partition's files together.

The servers file must be readable on every node (or the servers listed in the job), and the API key variable
(``api_key_env``) set on every node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.config import JobSpec
from tokenmill.errors import TokenmillError
from tokenmill.output import layout

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """How one partition's client ended."""

    index: int
    finished: bool
    completed: int
    failed: int
    retries: int
    elapsed_s: float
    error: str | None = None


def run_partition(
    job: JobSpec, index: int, count: int, allow_changed_job: bool = False, reopen: str | None = None
) -> PartitionResult:
    """Run one partition's client to its end (this is the body of each Ray task); ``reopen``: why it may add to
    a job its prefix marks finished (``run --reopen``: the input grew)."""
    from tokenmill.logs import setup_logging
    from tokenmill.run import run_job, run_sync

    setup_logging("INFO", Path(job.output.dir) / layout.Names(index).log)
    try:
        result = run_sync(
            run_job(
                job,
                allow_changed_job=allow_changed_job,
                live=False,
                install_signals=False,
                partition=(index, count),
                reopen=reopen,
            )
        )
    except TokenmillError as exc:
        log.error("partition %d of %d stopped: %s", index, count, exc)  # in its own log file too
        return PartitionResult(index, False, 0, 0, 0, 0.0, error=str(exc))
    s = result.summary
    finished = result.finished and (result.upload is None or result.upload.complete)  # done and, with a remote, up
    return PartitionResult(index, finished, s.completed_this_run, s.failed_this_run, s.retries, s.elapsed_s)


def _prepare(job: JobSpec, count: int, allow_changed_job: bool) -> None:
    """Before the clients start: record the job, and seal open shards no client of this run continues."""
    from tokenmill.output import OutputDir
    from tokenmill.output.identity import check_job_identity
    from tokenmill.output.layout import list_dir

    if job.output.remote:
        return  # each client takes its share over at its own node, from the prefix (see the module docstring)
    out = Path(job.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    check_job_identity(out, job, allow_changed_job)
    listing = list_dir(out)
    stale: list[int | None] = [p for p in sorted(listing.partitions) if p >= count]
    if listing.open:
        stale.insert(0, None)
    for part in stale:
        writer = OutputDir(out, shard_size=job.output.shard_size, partition=part)
        writer.open()
        writer.close(seal=True)


def run_partitions(
    job: JobSpec, count: int, ray_address: str, allow_changed_job: bool = False, reopen: str | None = None
) -> list[PartitionResult]:
    """Run ``count`` partition clients as Ray tasks (one CPU each) and wait for all of them; ``reopen`` as for
    :func:`run_partition`."""
    import ray

    from tokenmill.fleet.ray import connect
    from tokenmill.output.identity import job_with_ids

    job = job_with_ids(job)  # every partition takes its ids from the same place
    _prepare(job, count, allow_changed_job)
    connect(ray_address)
    task: Any = ray.remote(run_partition).options(num_cpus=1, max_retries=0)
    refs = [task.remote(job, i, count, allow_changed_job, reopen) for i in range(count)]
    results: list[PartitionResult] = ray.get(refs)
    return results
