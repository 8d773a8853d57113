"""The remote stages of a run with ``output.remote``: the prefix taken (whose it is, what is done there), the
uploader started before anything is generated, a finished job's new prompts gated by ``--reopen``, and the
uploads drained at the end (:mod:`tokenmill.run.runner` lists the stages in order)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

from tokenmill.config import JobSpec, OutputSpec
from tokenmill.errors import StoreConflict, StoreError, StoreUnavailable
from tokenmill.output import OutputDir, ResumeState, layout
from tokenmill.records import Prompt
from tokenmill.run.feed import PromptFeed
from tokenmill.run.runstate import RunState
from tokenmill.storage.prefix import MARKER, side_name
from tokenmill.storage.restore import RemoteStart, prepare_remote
from tokenmill.storage.store import display_url
from tokenmill.storage.upload import Uploader, UploadStatus

log = logging.getLogger(__name__)


class StoreWait:
    """What a run says while the store does not answer at its start: in the log (at the first failed try, or
    when the first try has taken ``upload.start_notice_s``) and in the writer lock, for ``tokenmill status``."""

    def __init__(self, out: OutputDir, spec: OutputSpec) -> None:
        assert spec.remote is not None
        self.out, self.spec, self.shown = out, spec, display_url(spec.remote)
        self.tries = 0

    def retried(self) -> str:
        up = self.spec.upload
        return (
            f"retrying every {up.backoff_base_s:.0f}-{up.backoff_max_s:.0f} s (doubling) for up to "
            f"output.upload.start_wait_s ({up.start_wait_s:.0f} s); then the run carries on from {self.out.root} "
            "and uploads retry in the background"
        )

    def slow(self) -> None:
        """The first try has not returned in ``start_notice_s``."""
        if self.tries:
            return
        waited = f"no answer yet after {self.spec.upload.start_notice_s:.0f} s"
        log.warning("the store at %s: %s (still trying): %s", self.shown, waited, self.retried())
        self.out.note("starting", {"on": "store", "where": self.shown, "error": waited, "tries": 0, "at": time.time()})

    def failed(self, exc: StoreUnavailable, delay: float) -> None:
        """A try failed (called from the remote stage's thread)."""
        self.tries += 1
        if self.tries == 1:
            log.warning("the store at %s does not answer (%s): %s", self.shown, exc, self.retried())
        what = {"on": "store", "where": self.shown, "error": str(exc), "tries": self.tries, "at": time.time()}
        self.out.note("starting", what)


async def take_remote(
    run: RunState, out: OutputDir, original: JobSpec, allow_changed: bool, allow_existing: bool, repair: bool
) -> RemoteStart | None:
    """Whose prefix it is and what is done there (a worker thread: the store is blocking)."""
    if not run.job.output.remote:
        return None
    wait = StoreWait(out, run.job.output)
    task = asyncio.ensure_future(
        asyncio.to_thread(
            prepare_remote,
            out.root,
            run.job,
            original,
            out.names.partition,
            allow_changed=allow_changed,
            allow_existing=allow_existing,
            repair_remote=repair,
            on_wait=wait.failed,
        )
    )
    done, _ = await asyncio.wait({task}, timeout=run.job.output.upload.start_notice_s)
    if not done:
        wait.slow()
    remote = await task
    if wait.tries and remote.reachable:
        log.info("the store at %s answers", wait.shown)
    run.job = remote.job
    return remote


async def start_upload(
    stack: contextlib.AsyncExitStack,
    run: RunState,
    out: OutputDir,
    remote: RemoteStart | None,
    allow_existing_prefix: bool,
) -> Uploader | None:
    """Start the uploader; a refused remote prefix stops the run before anything is generated."""
    if remote is None:
        return None
    names = layout.Names(out.names.partition)
    sides = (names.failed, names.skipped, names.events, layout.JOB)
    uploader = Uploader(
        out.root,
        run.job.output,
        allow_existing_prefix=allow_existing_prefix,
        store=remote.store,
        partition=run.partition,
        sides=sides if run.partition is not None else (*sides, layout.SUMMARY_JSON),
        success=run.target.success if run.target is not None else True,
        reopen=run.reopen,
    )
    out.on_seal = uploader.enqueue

    def abort_on_error(exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            uploader.abort()

    stack.push(abort_on_error)
    uploader.start(run.job_id)
    await uploader.started()
    return uploader


async def gate_finished_job(run: RunState, uploader: Uploader | None, feed: PromptFeed) -> AsyncIterator[Prompt]:
    """The prompts to dispatch. When the prefix already holds this job's ``_SUCCESS`` the job is finished: a run
    with new work for it (the input grew since, or failed prompts re-queued) reopens it only when asked to
    (``run.reopen``), and otherwise stops here, before anything is generated. (Shards of this directory that are
    not at the prefix yet stop the uploader's start the same way.)"""
    if uploader is None or not uploader.status().was_complete:
        return feed
    where = uploader.store.where(MARKER)
    log.info("%s is there: the job is finished; reading the input for prompts it does not hold", where)
    try:
        first: Prompt | None = await anext(feed)
    except StopAsyncIteration:
        first = None
    pending = uploader.status().pending
    if first is None and not pending:
        log.info("nothing new for the finished job: %s is left as it is", where)
        return _prepend(None, feed)
    if run.reopen is None:
        raise StoreConflict(
            f"{where} says this job is finished, but the input holds prompts its records do not (the first: id "
            f"{first.id if first else '?'}): the job's input grew since {MARKER} was written. A finished job is not "
            f"reopened silently: rerun with --reopen to add them ({MARKER} is withdrawn until the job is done "
            "again), or make the new prompts a job of their own (another output.dir and output.remote)"
        )
    log.warning(
        "REOPENING the finished job at %s (%s): %s is withdrawn before the first new shard is uploaded, and written "
        "again when the job is done",
        uploader.store.shown,
        run.reopen,
        where,
    )
    run.reopened = True
    return _prepend(first, feed)


async def _prepend(first: Prompt | None, rest: AsyncIterator[Prompt]) -> AsyncIterator[Prompt]:
    """``first`` (when there is one), then the rest; nothing at all after an exhausted feed."""
    if first is None:
        return
    yield first
    async for prompt in rest:
        yield prompt


async def finish_upload(uploader: Uploader, finished: bool, state: ResumeState) -> UploadStatus:
    """Wait for pending uploads (bounded by upload.drain_timeout_s) and say where the upload stands."""
    status = await uploader.drain(finished, {"failed": state.failed, "skipped": len(state.skipped_sources)})
    log.log(logging.INFO if status.complete else logging.WARNING, "%s", status.line())
    return status


def backlog_text(status: UploadStatus) -> str | None:
    """The summary's upload backlog as the drain left it (None: every shard is at the prefix)."""
    if not status.pending:
        return None
    size = f" ({status.pending_bytes / 1e6:,.1f} MB)" if status.pending_bytes else ""
    line = f"upload: {status.pending:,} shard(s) waiting{size} after the end of the run (rerun the same command)"
    return line + (f"; store error: {status.last_error}" if status.failing and status.last_error else "")


async def copy_summary(uploader: Uploader, out: Path, status: UploadStatus) -> None:
    """Copy the final summary beside the other records at the prefix (the drain copied the one before it); a
    store that fails now is only logged: the local summary is the one that counts, the next run copies it."""
    if status.fatal or status.failing:
        return
    try:
        data = (out / layout.SUMMARY_JSON).read_bytes()
        await asyncio.to_thread(uploader.store.replace_bytes, side_name(layout.SUMMARY_JSON), data, None)
    except (OSError, StoreError) as exc:
        log.warning("could not copy the final summary to %s: %s", uploader.store.shown, exc)
