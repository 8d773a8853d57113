"""The remote stage of a run with ``output.remote``: whose prefix it is, and what is done there.

It runs before the output is opened:

1. **Who owns it.** The claim holds the job's record (its ``job.json``). A directory holding a ``job.json`` must
   be that job's. A directory without one (a fresh machine) takes the record from the claim when the claim is
   the same job (the same fingerprint), so the job id, the source of the ids and the claim stay the same
   wherever it runs. A prefix nobody claimed is claimed now, before anything is written; partitions of one job
   that start at the same moment end up sharing one claim (the losers of the race take the winner's record).
2. **What is done there.** When the writer's records are not in the directory (it was lost with its machine, or
   this is a fresh one), they are taken over from the remote copy (:mod:`tokenmill.output.takeover`). When they
   are, the prefix must not hold shards of this writer that the directory does not know (another machine
   carried it on: refused, with what to do). The other writers' records (the partitions, earlier runs) join the
   done set from the remote alone. A prefix that disagrees with itself stops the run (see
   :mod:`tokenmill.storage.readback`), unless ``repair`` is asked for.
3. **When the store does not answer** within ``upload.start_wait_s``: a directory holding the writer's records
   carries on from them (other machines' records are then not seen: safe while the partitioning stays the same);
   a fresh directory of a partition stops (it cannot know what is done, or which job it belongs to); a fresh
   directory of a single-machine run carries on as a new job: if the prefix turns out to hold this job's
   records, the upload is refused (the claim names another job id), never mixed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tokenmill.config import JobSpec
from tokenmill.errors import StoreConflict, StoreUnavailable
from tokenmill.output import layout, manifest, offload
from tokenmill.output.identity import (
    JobRecord,
    create_record,
    job_with_ids,
    new_record,
    read_record,
    refuse_changed,
    refuse_other_input,
)
from tokenmill.output.takeover import TakenOver, holds_records, take_over
from tokenmill.storage.prefix import RemoteManifest, claim, read_claim, shard_of
from tokenmill.storage.readback import RemoteState, read_remote, repair
from tokenmill.storage.retry import Clock, retry_until
from tokenmill.storage.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class RemoteStart:
    """What the remote stage found, for the run to carry on with."""

    store: Store
    job: JobSpec  # with the ids' source as the owning job's record has it
    reachable: bool
    job_id: str | None = None  # None: not known yet (the store did not answer and the directory had no job.json)
    others: set[str] = field(default_factory=set)  # ids the other writers recorded at the prefix
    others_completed: int = 0
    others_failed: int = 0
    taken_over: TakenOver | None = None
    repaired: list[str] = field(default_factory=list)


def prepare_remote(
    out: Path,
    job: JobSpec,
    original: JobSpec,
    partition: int | None,
    *,
    allow_changed: bool = False,
    allow_existing: bool = False,
    repair_remote: bool = False,
    store: Store | None = None,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_wait: Callable[[StoreUnavailable, float], None] | None = None,
) -> RemoteStart:
    """Run the remote stage for the writer ``partition`` of ``out`` (locked by the caller). ``job`` has its ids'
    source decided, ``original`` is the job as given (for a source the owning record decides); the store is
    retried on ``clock`` until ``upload.start_wait_s`` has passed, ``on_wait(error, delay)`` told of each failed
    try of its first read (the claim)."""
    spec = job.output
    assert spec.remote is not None
    store = store or Store(spec.remote, spec.storage_options)
    fresh = not holds_records(out, partition)
    local = read_record(out)
    deadline = clock() + spec.upload.start_wait_s

    def retrying(fn: Callable[[], T], told: Callable[[StoreUnavailable, float], None] | None = None) -> T:
        return retry_until(fn, spec.upload, clock=clock, sleep=sleep, deadline=deadline, on_failure=told)

    try:
        found = retrying(lambda: read_claim(store), on_wait)
    except StoreUnavailable as exc:
        return _unreachable(store, job, local, fresh, partition, exc)
    record, job = _owner(out, store, found, local, job, original, allow_changed, allow_existing)
    if local is None:
        create_record(out, record)
    start = RemoteStart(store, job, reachable=True, job_id=record.job_id)
    resolve: Callable[[int | None], bool] = lambda w: fresh or w != partition  # noqa: E731
    state = retrying(lambda: read_remote(store, resolve))
    if state.problems and repair_remote:
        start.repaired = repair(state)
        state = read_remote(store, resolve)
    state.check()
    start.taken_over = _own_records(out, store, state, partition, fresh)
    start.others, start.others_completed, start.others_failed = state.done(skip=[partition])
    if state.superseded:
        log.info(
            "%d failure(s) at %s were completed by a later run; the completions count", state.superseded, store.shown
        )
    return start


def _owner(
    out: Path,
    store: Store,
    found: tuple[RemoteManifest, str | None] | None,
    local: JobRecord | None,
    job: JobSpec,
    original: JobSpec,
    allow_changed: bool,
    allow_existing: bool,
) -> tuple[JobRecord, JobSpec]:
    """The record of the job that owns the prefix (claiming it if nobody does), and the job to run."""
    for _ in range(3):
        if found is not None:
            remote, _ = found
            if local is not None:
                if remote.job_id != local.job_id:
                    raise StoreConflict(
                        f"{store.shown} belongs to another job (job id {remote.job_id}; {out} is job "
                        f"{local.job_id}). Its objects are never overwritten: use another output.remote "
                        "prefix, or the output directory that job wrote."
                    )
                return local, job
            if remote.job is None:
                raise StoreConflict(
                    f"{store.shown} is claimed by job {remote.job_id}, whose record an earlier tokenmill kept in its "
                    f"output directory only: copy that directory's job.json into {out} and rerun, or use another "
                    "output.remote prefix"
                )
            record = JobRecord.from_json(remote.job)
            adopted = job_with_ids(original, record=record)
            refuse_other_input(record, adopted, store.shown, "another output.remote")
            if not allow_changed:
                refuse_changed(record, adopted, store.shown, "another output.remote")
            return record, adopted
        record = local if local is not None else new_record(job)
        try:
            got = claim(store, record.job_id, allow_existing, record.to_json())
        except StoreConflict:
            if local is not None:
                raise
            found = read_claim(store)  # lost the race to another partition of the job: take its record
            if found is None:
                raise
            continue
        if got.created:
            log.info("claimed %s for job %s", store.shown, record.job_id)
        return record, job
    raise StoreConflict(f"the claim of {store.shown} keeps changing: another program is writing to it")


def _own_records(out: Path, store: Store, state: RemoteState, partition: int | None, fresh: bool) -> TakenOver | None:
    """This writer's records at the prefix: taken over by a ``fresh`` directory (one holding none of them), else
    checked against the directory's (:func:`_refuse_behind`)."""
    own = state.writer(partition)
    if fresh and own is not None and (own.entries or own.failed_data or own.skipped_data):
        taken = take_over(out, partition, list(own.entries.values()), store.where, own.failed_data, own.skipped_data)
        log.warning("%s held none of this writer's records: took over from %s: %s", out, store.shown, taken.line())
        return taken
    if not fresh and own is not None:
        _refuse_behind(out, store, state, partition)
    return None


def _refuse_behind(out: Path, store: Store, state: RemoteState, partition: int | None) -> None:
    """The directory holds the writer's records: the prefix must not hold shards of it the directory lacks."""
    names = layout.Names(partition)
    known = set(manifest.read(out / names.manifest).entries)
    known |= {name for name, _ in layout.list_dir(out, partition).sealed.values()}
    known |= offload.of_writer(offload.read(out), partition)
    foreign = set(state.claim.foreign) if state.claim is not None else set()
    ahead = sorted(
        n for n in state.listing if (s := shard_of(n)) is not None and s[0] == partition and n not in known | foreign
    )
    if ahead:
        shown = ", ".join(ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
        raise StoreConflict(
            f"{out} is behind {store.shown}: the prefix holds {len(ahead)} shard(s) of this writer that the directory "
            f"does not know ({shown}): another machine carried this job on from the remote. Move {out} aside (or "
            "delete it) and rerun: the run takes what is done over from the remote."
        )


def _unreachable(
    store: Store, job: JobSpec, local: JobRecord | None, fresh: bool, partition: int | None, exc: Exception
) -> RemoteStart:
    job_id = local.job_id if local is not None and local.job_id else None
    if fresh and partition is not None:
        raise StoreUnavailable(
            f"the store at {store.shown} does not answer ({exc}): partition {partition} has nothing recorded here, so "
            "it cannot know what is done nor which job it belongs to. Rerun when the store answers."
        )
    if fresh:
        log.warning(
            "the store at %s does not answer (%s): cannot check whether it already holds this job's records; "
            "generating anyway (if it does, this directory's upload is refused, never mixed in)",
            store.shown,
            exc,
        )
    else:
        log.warning(
            "the store at %s does not answer (%s): carrying on from %s alone; uploads retry in the background",
            store.shown,
            exc,
            "the local output",
        )
    return RemoteStart(store, job, reachable=False, job_id=job_id)
