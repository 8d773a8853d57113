"""The background uploader: copy each sealed shard to ``output.remote`` while the run goes on.

One worker thread does every blocking store call, so the event loop never waits on the store; the writer
hands it shards through :meth:`Uploader.enqueue` (the ``on_seal`` callback), which only appends to a queue.
It uploads one writer's files: the default writer's, or one partition's (see :mod:`tokenmill.storage.prefix`).

The worker's life, in order:
1. claim the prefix (:class:`~tokenmill.storage.ledger.RemoteLedger`): refuse another job's prefix, or foreign
   objects unless ``--allow-existing-prefix``; create the writer's remote manifest before any shard;
2. reconcile: every shard in the local manifest that the remote manifest does not list with the same
   sha256 (or whose object is gone) is queued, so a resumed run uploads exactly what is missing;
3. upload queued shards oldest first with put-if-absent; when an object is already there, its content is
   compared (sha256) and it is adopted when equal, reported and left alone when not (a shard that lives at
   the remote only, taken over or offloaded, is adopted the same way);
4. rewrite the remote manifest after shards, at most every ``manifest_interval_s``, its new shards' ids first
   in an index segment (the ledger), so it never lists a shard that is not there;
5. copy the other records (``sides``: failures, skips, the event log, job.json) under ``_tokenmill/`` as they
   grow, at most every ``side_interval_s`` (:class:`~tokenmill.storage.sides.SideCopier`);
6. at the end (:meth:`Uploader.finish`): drain the queue for up to ``drain_timeout_s``, write the manifest and
   the other records, and, when the run finished and every shard is up, mark it complete
   (:mod:`tokenmill.storage.complete`): ``_SUCCESS`` last, or a partition's done marker (unless ``success`` is
   off: a trial whose input is cut, uploading to the job's prefix, leaves ``_SUCCESS`` to a run of the whole
   input).

``_SUCCESS`` is written once. A prefix that holds this job's ``_SUCCESS`` when the run starts is a finished job:
shards of this directory that it lacks stop the start unless the run was asked to ``reopen`` the job; a reopened
job's ``_SUCCESS`` is withdrawn (a warning says so) before its first new shard goes up, and written again at the
end. A rerun with nothing new leaves it as it is.

A store error is retried with exponential backoff (:mod:`tokenmill.storage.retry`) for as long as the run goes on
(a store can be down for hours during a run of days); only the end of the run puts a deadline on it. Nothing here
can stop the run: the local output stays the source of truth, and rerunning the same command uploads whatever is
missing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tokenmill.config import OutputSpec
from tokenmill.errors import StoreConflict, StoreError, StoreUnavailable
from tokenmill.output import SealedShard, manifest
from tokenmill.storage.ledger import RemoteLedger
from tokenmill.storage.prefix import MARKER
from tokenmill.storage.put import put_shard
from tokenmill.storage.retry import Clock, retry_until
from tokenmill.storage.sides import SideCopier
from tokenmill.storage.status import UploadStatus
from tokenmill.storage.store import Store

__all__ = ["UploadStatus", "Uploader"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Stopped(Exception):
    """The worker was told to stop (abort, or the end-of-run deadline passed) while waiting to retry."""


class Uploader:
    """Uploads sealed shards of one output directory to one remote prefix, from a worker thread.

    Typical use by the runner::

        up = Uploader(out_path, job.output, allow_existing_prefix=flag)
        out = OutputDir(out_path, shard_size, on_seal=up.enqueue)
        out.open(); job_id = ...; up.start(job_id)
        ... run ...; out.close(seal=finished)
        status = await up.drain(finished, {"failed": n})
    """

    def __init__(
        self,
        out_dir: Path,
        spec: OutputSpec,
        *,
        allow_existing_prefix: bool = False,
        store: Store | None = None,
        partition: tuple[int, int] | None = None,
        sides: tuple[str, ...] = (),
        success: bool = True,
        reopen: str | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """``partition`` = (index, count): upload that partition's files; ``sides``: names of local files to copy
        under ``_tokenmill/`` as they grow (failures, skips, the event log, job.json, ...); ``success``: mark the
        prefix complete when the run finishes; ``reopen``: why this run may add shards to a job its prefix marks
        finished (None: it may not); ``clock``: monotonic seconds, for every interval and deadline here."""
        if not spec.remote and store is None:
            raise StoreError("output.remote is not set")
        self.out_dir = Path(out_dir)
        self.spec = spec
        self.allow_existing = allow_existing_prefix
        self.store = store or Store(str(spec.remote), spec.storage_options)
        self.partition = partition
        self.success = success
        self.reopen = reopen
        self._clock = clock
        up = spec.upload
        writer = partition[0] if partition is not None else None
        self.ledger = RemoteLedger(self.store, self.out_dir, writer, self._retry, clock, up.manifest_interval_s)
        self.sides = SideCopier(self.store, self.out_dir, sides, self._retry, clock, up.side_interval_s)
        self._cond = threading.Condition()
        self._queue: list[SealedShard] = []
        self._known: set[str] = set()
        self._queued_at: dict[str, float] = {}  # when each pending shard was first queued (on the clock)
        self._status = UploadStatus(remote=self.store.shown)  # pending, failing: filled in by status()
        self._job_id = ""
        self._finishing = False
        self._finished_run = False
        self._counts: dict[str, int] = {}
        self._deadline: float | None = None
        self._abort = False
        self._thread: threading.Thread | None = None
        self._failing = False
        self._settled = threading.Event()  # the prefix is claimed and reconciled, or refused

    # -- the runner's side (event loop thread) -----------------------------------------------------------

    def enqueue(self, shard: SealedShard) -> None:
        """Queue a just-sealed shard (never blocks; the ``on_seal`` callback)."""
        with self._cond:
            self._add(shard)
            self._cond.notify_all()

    def start(self, job_id: str) -> None:
        """Start the worker for ``job_id`` (the owner recorded in the remote manifest)."""
        if not job_id:
            raise StoreError("the output directory's job.json has no job_id; it cannot own a remote prefix")
        self._job_id = job_id
        self._thread = threading.Thread(target=self._main, name="tokenmill-upload", daemon=True)
        self._thread.start()

    async def started(self) -> None:
        """Wait (up to ``upload.start_wait_s``) for the prefix to be claimed. A refused prefix raises
        :class:`StoreConflict` (nothing should be generated for it); a store that does not answer in time is
        only logged, and the worker keeps trying while the run goes on."""
        settled = await asyncio.to_thread(self._settled.wait, self.spec.upload.start_wait_s)
        status = self.status()
        if status.fatal:
            raise StoreConflict(status.fatal)
        if not settled:
            log.warning(
                "the store at %s has not answered for %.0f s (%s); generating anyway, uploads retry in the background",
                self.store.shown,
                self.spec.upload.start_wait_s,
                status.last_error or "no error yet",
            )

    def status(self) -> UploadStatus:
        """A snapshot of the upload status."""
        with self._cond:
            since = [self._queued_at[i.name] for i in self._queue if i.name in self._queued_at]
            return self._status.copy(
                pending=len(self._queue),
                pending_bytes=sum(i.bytes for i in self._queue),
                oldest_pending_s=max(0.0, self._clock() - min(since)) if since else None,
                failing=self._failing,
            )

    async def drain(self, finished: bool, counts: dict[str, int] | None = None) -> UploadStatus:
        """Wait (up to ``upload.drain_timeout_s``) for pending uploads, write the manifest and, when the run
        ``finished``, the final marker; then stop the worker. Cancelling this stops the worker at once.

        A store call already in flight at the deadline gets as long again to return; after that the worker
        (a daemon thread) is left behind and its shard counts as not uploaded."""
        self.finish(finished, counts)
        pending = self.status().pending
        if pending:
            log.info(
                "waiting for %d pending upload(s) to %s (up to %.0f s)",
                pending,
                self.store.shown,
                self.spec.upload.drain_timeout_s,
            )
        thread = self._thread
        if thread is not None:
            wait = max(self.spec.upload.drain_timeout_s, 1.0)
            try:
                await asyncio.to_thread(thread.join, wait)
                if thread.is_alive():
                    self.abort()
                    await asyncio.to_thread(thread.join, wait)
            except asyncio.CancelledError:
                self.abort()
                raise
        return self.status()

    def finish(self, finished: bool, counts: dict[str, int] | None = None) -> None:
        """Tell the worker the run is over: drain, then stop (does not wait; see :meth:`drain`)."""
        with self._cond:
            self._finishing = True
            self._finished_run = finished
            self._counts = dict(counts or {})
            self._deadline = self._clock() + self.spec.upload.drain_timeout_s
            self._cond.notify_all()

    def abort(self) -> None:
        """Stop the worker after its current store call, uploaded or not."""
        with self._cond:
            self._abort = True
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the worker thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the worker --------------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._prepare()
            self._loop()
            self._final()
        except _Stopped:
            pass
        except StoreConflict as exc:
            self._fail(str(exc))
        except Exception as exc:  # the uploader must never take the run down with it
            log.exception("the uploader stopped on an unexpected error")
            self._fail(f"unexpected error: {exc!r}; rerun the same command to upload what is missing")
        finally:
            with self._cond:
                self._status.pending = len(self._queue)
            self._settled.set()

    def _fail(self, message: str) -> None:
        log.error("upload to %s stopped: %s", self.store.shown, message)
        with self._cond:
            self._status.fatal = message

    def _prepare(self) -> None:
        """Claim the prefix and queue every local shard it does not hold (reconciliation)."""
        listing = self.ledger.open(self._job_id, self.allow_existing)
        found = self.ledger.reconcile(manifest.read(self.out_dir / self.ledger.names.manifest).entries, listing)
        with self._cond:
            ahead = self._queue  # shards sealed before the prefix was ready
            self._queue, self._known = [], set()
            self._known.update(found.there, found.conflicting)
            self._status.local_shards = len(found.there) + len(found.conflicting)
            self._status.already += len(found.there)
            for name in found.conflicting:
                self._conflict(name, "the remote manifest lists other content under this name")
            for item in [*found.missing, *ahead]:
                self._add(item)
            self._status.ready = True
            self._status.was_complete = self.ledger.complete
            queued = len(self._queue)
            new = sum(1 for item in self._queue if listing.get(item.name) != item.bytes)  # not there to adopt
        if self.reopen is None:
            self.ledger.refuse_finished(new)
        self._settled.set()
        if queued:
            log.info("%d shard(s) to upload to %s", queued, self.store.shown)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._finishing and not self._abort:
                    due = self.ledger.due()
                    if due is not None and due <= 0:
                        break
                    self._cond.wait(due)
                if self._abort or (self._deadline is not None and self._clock() >= self._deadline):
                    raise _Stopped
                if not self._queue and self._finishing:
                    return
                item = self._queue[0] if self._queue else None
            if item is not None:
                self._upload(item)
                with self._cond:
                    done = self._queue.pop(0)
                    self._queued_at.pop(done.name, None)
            due = self.ledger.due()
            if due is not None and due <= 0:
                self._write_manifest()
            if self.sides.due():
                self.sides.sync()

    def _final(self) -> None:
        if self.ledger.dirty:
            self._write_manifest()
        self.sides.sync()
        if not (self._finished_run and self.status().complete):
            return
        if not self.success:
            log.info(
                "every shard is at %s; %s is not written: this run's input was cut (--limit/--offset), the job is "
                "done when a run of its whole input finishes",
                self.store.shown,
                MARKER,
            )
        elif self.partition is None:
            self.ledger.write_success()
            with self._cond:
                self._status.marker = True
        else:
            whole = self.ledger.mark_done(self.partition, dict(self._counts))
            with self._cond:
                self._status.done_marker = True
                self._status.marker = whole

    def _upload(self, item: SealedShard) -> None:
        def withdraw_markers() -> None:  # new shards are coming: the done markers go down first
            if self.ledger.withdraw_markers(self.reopen):
                with self._cond:
                    self._status.reopened = True

        delete = self.spec.delete_after_upload
        put = put_shard(
            self.store,
            item,
            self._retry,
            self._clock,
            finished=self.ledger.complete and self.reopen is None,
            verify=delete,
            before_put=withdraw_markers,
        )
        with self._cond:
            if put.conflict is not None:
                self._conflict(item.name, put.conflict)
                return
            if put.wrote:
                self._status.uploaded += 1
                self._status.bytes += item.bytes
                self._status.put_seconds += put.took
            else:
                self._status.already += 1
        self.ledger.add(item, delete=delete and put.verified)
        log.debug("uploaded %s (%d bytes, %.2f s)", item.name, item.bytes, put.took)

    def _write_manifest(self) -> None:
        deleted = self.ledger.write()
        with self._cond:
            self._status.deleted += deleted

    # -- helpers (call with the lock held where noted) ---------------------------------------------------

    def _add(self, item: SealedShard) -> None:
        """Queue ``item`` unless already known (lock held)."""
        if item.name in self._known:
            return
        self._known.add(item.name)
        self._queue.append(item)
        self._queued_at.setdefault(item.name, self._clock())
        self._status.local_shards += 1

    def _conflict(self, name: str, why: str) -> None:
        """Record a shard that cannot be uploaded (lock held)."""
        self._status.conflicts[name] = why
        log.error("not uploading %s to %s: %s", name, self.store.shown, why)

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        """Call ``fn`` until it succeeds; StoreUnavailable is retried with exponential backoff, for as long as
        the run goes on (the wait ends at an abort or the end-of-run deadline)."""

        def failed(exc: StoreUnavailable, delay: float) -> None:
            with self._cond:
                self._status.retries += 1
                self._status.last_error = str(exc)
            level = logging.WARNING if not self._failing or delay >= self.spec.upload.backoff_max_s else logging.DEBUG
            log.log(level, "%s failed, retrying in %.1f s: %s", what, delay, exc)
            self._failing = True

        result = retry_until(fn, self.spec.upload, clock=self._clock, sleep=self._wait, on_failure=failed)
        if self._failing:
            self._failing = False
            log.info("the store at %s answers again; uploads go on", self.store.shown)
        return result

    def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds unless told to stop; raise _Stopped when the run's deadline passes."""
        end = self._clock() + delay
        with self._cond:
            while True:
                if self._abort:
                    raise _Stopped
                now = self._clock()
                if self._deadline is not None and now >= self._deadline:
                    raise _Stopped
                if now >= end:
                    return
                limit = end if self._deadline is None else min(end, self._deadline)
                self._cond.wait(limit - now)
