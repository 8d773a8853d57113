"""The background uploader: copy each sealed shard to ``output.remote`` while the run goes on.

One worker thread does every blocking store call, so the event loop never waits on the store; the writer
hands it shards through :meth:`Uploader.enqueue` (the ``on_seal`` callback), which only appends to a queue.
It uploads one writer's files: the default writer's, or one partition's (see :mod:`tokenmill.storage.prefix`).

The worker's life, in order:
1. claim the prefix (:func:`tokenmill.storage.prefix.claim`): refuse another job's prefix, or foreign objects
   unless ``--allow-existing-prefix``; create the writer's remote manifest before any shard;
2. reconcile: every shard in the local manifest that the remote manifest does not list with the same
   sha256 (or whose object is gone) is queued, so a resumed run uploads exactly what is missing;
3. upload queued shards oldest first with put-if-absent; when an object is already there, its content is
   compared (sha256) and it is adopted when equal, reported and left alone when not (a shard that lives at
   the remote only, taken over or offloaded, is adopted the same way);
4. rewrite the remote manifest after shards, at most every ``manifest_interval_s`` (long runs would
   otherwise rewrite an ever larger manifest after every shard), so it never lists a shard that is not
   there and lags the uploads by at most that interval; the manifest lines of the new shards (their ids) go
   first into an index segment (:mod:`tokenmill.storage.index`) that the manifest then lists;
5. copy the other records (``sides``: failures, skips, the event log, job.json) under ``_tokenmill/`` as they
   grow, at most every ``side_interval_s``;
6. at the end (:meth:`Uploader.finish`): drain the queue for up to ``drain_timeout_s``, write the manifest and
   the other records, and, when the run finished and every shard is up, mark it complete
   (:mod:`tokenmill.storage.complete`): ``_SUCCESS`` last, or a partition's done marker (unless ``success`` is
   off: a trial whose input is cut, uploading to the job's prefix, leaves ``_SUCCESS`` to a run of the whole
   input).

``_SUCCESS`` is written once. A prefix that holds this job's ``_SUCCESS`` when the run starts is a finished job:
shards of this directory that it lacks stop the start unless the run was asked to ``reopen`` the job; a reopened
job's ``_SUCCESS`` is withdrawn (a warning says so) before its first new shard goes up, and written again at the
end. A rerun with nothing new leaves it as it is.

A store error is retried with exponential backoff for as long as the run goes on (a store can be down for
hours during a run of days); only the end of the run puts a deadline on it. Nothing here can stop the run:
the local output stays the source of truth, and rerunning the same command uploads whatever is missing.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tokenmill.config import OutputSpec, backoff
from tokenmill.errors import StoreConflict, StoreError, StoreUnavailable
from tokenmill.output import SealedShard, layout, manifest, offload
from tokenmill.storage import complete, index
from tokenmill.storage.prefix import (
    MARKER,
    RemoteManifest,
    RemoteShard,
    claim,
    done_marker,
    index_name,
    side_name,
    writer_manifest,
)
from tokenmill.storage.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Stopped(Exception):
    """The worker was told to stop (abort, or the end-of-run deadline passed) while waiting to retry."""


@dataclass(frozen=True, slots=True)
class LocalShard:
    """A sealed local shard to upload."""

    name: str
    path: Path
    count: int
    bytes: int
    sha256: str
    line: builtins.bytes = b""  # its local manifest line (ids included), for the remote index


@dataclass(slots=True)
class UploadStatus:
    """Where the upload stands (a copy; safe to read from any thread)."""

    remote: str
    local_shards: int = 0  # sealed shards the uploader knows of
    uploaded: int = 0  # shards this run put
    already: int = 0  # shards found remote with the same content
    pending: int = 0
    pending_bytes: int = 0  # bytes of the pending shards
    oldest_pending_s: float | None = None  # how long the oldest pending shard has waited (None: none waits)
    failing: bool = False  # the store's last operation failed and is being retried (last_error says why)
    conflicts: dict[str, str] = field(default_factory=dict)  # shard -> why it is not uploaded
    bytes: int = 0  # bytes this run put
    put_seconds: float = 0.0  # time spent in those puts
    retries: int = 0
    deleted: int = 0  # local shards deleted after a verified upload
    last_error: str | None = None
    fatal: str | None = None  # the uploader gave up (prefix refused, or an unexpected failure)
    marker: bool = False  # _SUCCESS is written (by this run, or by another partition before)
    was_complete: bool = False  # the prefix held this job's _SUCCESS when the run started (a finished job)
    reopened: bool = False  # this run withdrew that _SUCCESS to add new shards (asked for: --reopen, ...)
    done_marker: bool = False  # a partition: its done marker is written
    ready: bool = False  # the prefix was claimed and reconciled

    @property
    def complete(self) -> bool:
        """Every known shard is in the remote prefix and listed in its manifest."""
        return self.ready and not self.fatal and not self.conflicts and self.pending == 0

    @property
    def rate_mb_s(self) -> float:
        """Upload throughput of this run's puts, in MB/s."""
        return self.bytes / 1e6 / self.put_seconds if self.put_seconds > 0 else 0.0

    def line(self) -> str:
        """One status line for the end of a run."""
        where = self.remote
        moved = f"{self.uploaded} uploaded now, {self.bytes / 1e6:,.1f} MB at {self.rate_mb_s:,.1f} MB/s"
        if self.complete:
            kept = self.was_complete and not self.reopened
            marker = ", _SUCCESS there since an earlier run (untouched)" if kept else ", _SUCCESS written"
            tail = marker if self.marker else ", this partition marked done" if self.done_marker else ""
            if self.deleted:
                tail += f"; {self.deleted} local shard(s) deleted after a verified upload"
            return (
                f"upload: all {self.local_shards} shards are at {where} ({moved}; {self.already} already there){tail}"
            )
        if self.fatal:
            return f"upload stopped: {self.fatal}"
        missing = self.pending + len(self.conflicts)
        lines = [f"upload incomplete: {missing} of {self.local_shards} shards are not at {where} ({moved})"]
        for name, why in list(self.conflicts.items())[:5]:
            lines.append(f"  {name}: {why}")
        if self.pending:
            if self.last_error:
                lines.append(f"  last store error: {self.last_error}")
            lines.append("  the local output is complete; rerun the same command to upload what is missing")
        return "\n".join(lines)


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
    ) -> None:
        """``partition`` = (index, count): upload that partition's files; ``sides``: names of local files to copy
        under ``_tokenmill/`` as they grow (failures, skips, the event log, job.json, ...); ``success``: mark the
        prefix complete when the run finishes; ``reopen``: why this run may add shards to a job its prefix marks
        finished (None: it may not)."""
        if not spec.remote and store is None:
            raise StoreError("output.remote is not set")
        self.out_dir = Path(out_dir)
        self.spec = spec
        self.allow_existing = allow_existing_prefix
        self.store = store or Store(str(spec.remote), spec.storage_options)
        self.partition = partition
        self.writer = partition[0] if partition is not None else None
        self.names = layout.Names(self.writer)
        self.head_name = writer_manifest(self.writer)
        self.sides = sides
        self.success = success
        self.reopen = reopen
        self._side_stamps: dict[str, tuple[int, int]] = {}
        self._last_sides = float("-inf")
        self._unindexed: dict[str, bytes] = {}  # manifest lines of shards the remote index does not hold yet
        self._cond = threading.Condition()
        self._queue: list[LocalShard] = []
        self._known: set[str] = set()
        self._queued_at: dict[str, float] = {}  # when each pending shard was first queued (monotonic)
        self._status = UploadStatus(remote=self.store.shown)
        self._job_id = ""
        self._manifest: RemoteManifest | None = None
        self._tag: str | None = None
        self._dirty = False
        self._last_manifest = float("-inf")
        self._done_seen = False  # this partition's done marker is at the prefix
        self._complete = False  # this job's _SUCCESS is at the prefix
        self._finishing = False
        self._finished_run = False
        self._counts: dict[str, int] = {}
        self._deadline: float | None = None
        self._abort = False
        self._thread: threading.Thread | None = None
        self._failing = False
        self._settled = threading.Event()  # the prefix is claimed and reconciled, or refused
        self._deletable: list[LocalShard] = []  # verified remote copies, deleted once the manifest lists them

    # -- the runner's side (event loop thread) -----------------------------------------------------------

    def enqueue(self, shard: SealedShard) -> None:
        """Queue a just-sealed shard (never blocks; the ``on_seal`` callback)."""
        item = LocalShard(shard.name, shard.path, shard.count, shard.bytes, shard.sha256, shard.line)
        with self._cond:
            self._add(item)
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
            return self._snapshot()

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
            self._deadline = time.monotonic() + self.spec.upload.drain_timeout_s
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
        claimed = self._retry("claim", lambda: claim(self.store, self._job_id, self.allow_existing))
        if claimed.created:
            log.info("claimed %s for job %s", self.store.shown, self._job_id)
        if claimed.foreign:
            log.info("%s holds %d object(s) of someone else; they are left alone", self.store.shown, claimed.foreign)
        listing = self._retry("list", self.store.list)
        self._retry("clean", self.store.remove_partials)
        remote, self._tag = (claimed.manifest, claimed.tag) if self.writer is None else self._retry("read", self._head)
        self._manifest = remote
        self._done_seen = self.writer is not None and done_marker(self.writer) in listing
        self._complete = MARKER in listing and self._retry("read", lambda: complete.is_ours(self.store, self._job_id))
        local = manifest.read(self.out_dir / self.names.manifest).entries
        if remote.shards and not remote.index:  # a manifest an earlier version wrote: index what it lists
            self._unindexed = {n: e.encode() for n, e in local.items() if n in remote.shards}
            self._dirty = bool(self._unindexed)
        with self._cond:
            ahead = self._queue  # shards sealed before the prefix was ready
            self._queue, self._known = [], set()
            self._status.local_shards = 0
            for entry in sorted(local.values(), key=lambda e: e.shard):
                path = self.out_dir / entry.shard
                item = LocalShard(entry.shard, path, entry.count, entry.bytes, entry.sha256, entry.encode())
                there = remote.shards.get(entry.shard)
                if there is not None and there.sha256 == entry.sha256 and listing.get(entry.shard) == entry.bytes:
                    self._known.add(entry.shard)
                    self._status.local_shards += 1
                    self._status.already += 1
                elif there is not None and there.sha256 != entry.sha256:
                    self._known.add(entry.shard)
                    self._status.local_shards += 1
                    self._conflict(entry.shard, "the remote manifest lists other content under this name")
                else:
                    self._add(item)
            for item in ahead:
                self._add(item)
            self._status.ready = True
            self._status.was_complete = self._complete
            queued = len(self._queue)
            new = sum(1 for item in self._queue if listing.get(item.name) != item.bytes)  # not there to adopt
        if self._complete and new and self.reopen is None:
            raise StoreConflict(
                f"{self.store.where(MARKER)} says this job is finished, but {new} sealed shard(s) of {self.out_dir} "
                "are not at the prefix (written by a run that did not upload, e.g. a trial, after the job was "
                "finished). A finished job is not reopened silently: rerun with --reopen to add them "
                f"({MARKER} is withdrawn until the job is done again)"
            )
        self._settled.set()
        if queued:
            log.info("%d shard(s) to upload to %s", queued, self.store.shown)

    def _head(self) -> tuple[RemoteManifest, str | None]:
        """This partition's manifest, created (empty) when it has none yet."""
        found = self.store.read(self.head_name)
        if found is None:
            self.store.put_bytes_if_absent(self.head_name, RemoteManifest(job_id=self._job_id).encode())
            found = self.store.read(self.head_name)
            if found is None:
                raise StoreUnavailable(f"{self.store.where(self.head_name)} is not there right after it was written")
        head = RemoteManifest.decode(found.data, self.store.where(self.head_name))
        if head.job_id != self._job_id:
            raise StoreConflict(
                f"{self.store.where(self.head_name)} belongs to another job (job id {head.job_id}); this is job "
                f"{self._job_id}: use another output.remote prefix"
            )
        return head, found.tag

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._finishing and not self._abort:
                    due = self._manifest_due()
                    if due is not None and due <= 0:
                        break
                    self._cond.wait(due)
                if self._abort or (self._deadline is not None and time.monotonic() >= self._deadline):
                    raise _Stopped
                if not self._queue and self._finishing:
                    return
                item = self._queue[0] if self._queue else None
            if item is not None:
                self._upload(item)
                with self._cond:
                    done = self._queue.pop(0)
                    self._queued_at.pop(done.name, None)
            due = self._manifest_due()
            if due is not None and due <= 0:
                self._write_manifest()
            if time.monotonic() - self._last_sides >= self.spec.upload.side_interval_s:
                self._sync_sides()

    def _manifest_due(self) -> float | None:
        """Seconds until the remote manifest should be rewritten (<= 0: now), None when it is current."""
        if not self._dirty:
            return None
        return self._last_manifest + self.spec.upload.manifest_interval_s - time.monotonic()

    def _final(self) -> None:
        if self._dirty:
            self._write_manifest()
        self._sync_sides()
        status = self.status()
        if not (self._finished_run and status.complete):
            return
        if not self.success:
            log.info(
                "every shard is at %s; %s is not written: this run's input was cut (--limit/--offset), the job is "
                "done when a run of its whole input finishes",
                self.store.shown,
                MARKER,
            )
            return
        if self.partition is None:
            wrote = self._retry("write", lambda: complete.write_success(self.store, self._job_id))
            if wrote is None:
                raise StoreConflict(
                    f"{self.store.where(MARKER)} was not written by this job and is not replaced; every shard and "
                    "the manifest are uploaded, but the prefix has no marker of this job"
                )
            with self._cond:
                self._status.marker = True
            if wrote == "kept":
                log.info("%s is there already and left as it is (nothing new)", self.store.where(MARKER))
            elif wrote == "corrected":
                log.warning(
                    "%s disagreed with the prefix's manifests and failure copies: rewritten with their totals",
                    self.store.where(MARKER),
                )
            else:
                log.info("wrote %s", self.store.where(MARKER))
            return
        index_, count = self.partition
        whole = self._retry(
            "write", lambda: complete.mark_done(self.store, self._job_id, index_, count, dict(self._counts))
        )
        with self._cond:
            self._status.done_marker = True
            self._status.marker = whole
        log.info(
            "partition %d of %d is done at %s%s",
            index_,
            count,
            self.store.shown,
            f"; every partition is: wrote {self.store.where(MARKER)}" if whole else "",
        )

    def _sync_sides(self) -> None:
        """Copy each side file that changed since its last copy (our own objects: replaced unconditionally)."""
        self._last_sides = time.monotonic()
        for local in self.sides:
            path = self.out_dir / local
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if self._side_stamps.get(local) == stamp:
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                log.warning("cannot read %s to copy it to %s: %s", path, self.store.shown, exc)
                continue
            self._put_side(side_name(local), data)
            self._side_stamps[local] = stamp

    def _put_side(self, name: str, data: bytes) -> None:
        self._retry("write", lambda: self.store.replace_bytes(name, data, None))

    def _upload(self, item: LocalShard) -> None:
        if not item.path.exists():
            there = self._retry("read", lambda: self.store.sha256(item.name))
            if there != item.sha256:
                with self._cond:
                    self._conflict(item.name, f"the local file {item.path} is gone and the remote holds no copy of it")
                return
            self._listed(item, wrote=False, took=0.0)  # it lives at the remote only (taken over): adopted
            return
        if self._complete and self.reopen is None:  # a new shard for a finished job: never added silently
            if self._retry("read", lambda: self.store.sha256(item.name)) == item.sha256:
                self._listed(item, wrote=False, took=0.0)  # it is there already: adopted, nothing is added
                return
            with self._cond:
                self._conflict(
                    item.name,
                    f"{MARKER} says the job is finished, and it is not reopened silently: rerun with --reopen to add "
                    "this shard",
                )
            return
        self._withdraw_marker()
        started = time.monotonic()
        wrote = self._retry("upload", lambda: self.store.put_file_if_absent(item.path, item.name))
        took = time.monotonic() - started
        if not wrote:
            there = self._retry("read", lambda: self.store.sha256(item.name))
            if there != item.sha256:
                with self._cond:
                    self._conflict(item.name, "an object with other content is there; it was not overwritten")
                return
        if self.spec.delete_after_upload and not self._verified(item, None if wrote else item.sha256):
            return
        self._listed(item, wrote, took)

    def _listed(self, item: LocalShard, wrote: bool, took: float) -> None:
        """``item`` is at the prefix: count it and list it in the next manifest (and index segment)."""
        with self._cond:
            if wrote:
                self._status.uploaded += 1
                self._status.bytes += item.bytes
                self._status.put_seconds += took
            else:
                self._status.already += 1
        assert self._manifest is not None
        self._manifest.shards[item.name] = RemoteShard(item.count, item.bytes, item.sha256)
        self._unindexed[item.name] = item.line or self._line_of(item.name)
        self._dirty = True
        log.debug("uploaded %s (%d bytes, %.2f s)", item.name, item.bytes, took)

    def _line_of(self, shard: str) -> bytes:
        entry = manifest.read(self.out_dir / self.names.manifest).entries.get(shard)
        return entry.encode() if entry is not None else b""

    def _write_manifest(self) -> None:
        current = self._manifest
        assert current is not None
        self._write_index(current)

        def put() -> None:
            self.store.replace_bytes(self.head_name, current.encode(), self._tag)
            found = self.store.read(self.head_name)
            self._tag = found.tag if found else None

        self._retry("write", put)
        self._dirty = False
        self._last_manifest = time.monotonic()
        self._delete_local()

    def _write_index(self, current: RemoteManifest) -> None:
        """Put the manifest lines of the shards listed since the last segment into a new index segment (folding
        every segment into one when the manifest lists :data:`~tokenmill.storage.index.FOLD_AT` of them)."""
        lines = [line for _, line in sorted(self._unindexed.items()) if line]
        if not lines:
            self._unindexed = {}
            return
        if len(current.index) + 1 >= index.FOLD_AT:
            entries = manifest.read(self.out_dir / self.names.manifest).entries
            lines = [entries[n].encode() for n in sorted(current.shards) if n in entries]
            current.index = []
        data = index.encode(lines)
        name = index_name(self.writer, data)
        self._retry("write", lambda: self.store.put_bytes_if_absent(name, data))
        if name not in current.index:
            current.index.append(name)
        self._unindexed = {}

    def _verified(self, item: LocalShard, known_sha: str | None) -> bool:
        """Read the remote copy back; queue the local shard for deletion when it is the same."""
        there = known_sha or self._retry("read", lambda: self.store.sha256(item.name))
        if there != item.sha256:
            with self._cond:
                self._conflict(item.name, "the uploaded object reads back with another sha256; the local shard is kept")
            return False
        self._deletable.append(item)
        return True

    def _delete_local(self) -> None:
        """Delete local shards whose verified copies the remote manifest now lists (recorded first)."""
        for item in self._deletable:
            offload.record(self.out_dir, item.name, item.sha256, self.store.where(item.name))
            item.path.unlink(missing_ok=True)
            with self._cond:
                self._status.deleted += 1
        if self._deletable:
            log.info("deleted %d local shard(s) after a verified upload", len(self._deletable))
        self._deletable = []

    def _withdraw_marker(self) -> None:
        """New shards are coming: a partition's done marker goes down first; so does this job's ``_SUCCESS`` when
        the run was asked to reopen the finished job (never otherwise: see :meth:`_upload`)."""
        if self._done_seen:
            writer = self.writer
            assert writer is not None
            if self._retry("delete", lambda: complete.withdraw_done(self.store, writer)):
                log.info("withdrew %s until the new shards are uploaded", self.store.where(done_marker(writer)))
            self._done_seen = False
        if self._complete:
            if self._retry("delete", lambda: complete.withdraw_success(self.store, self._job_id)):
                log.warning(
                    "REOPENED the finished job at %s (%s): withdrew %s; it is written again when the job is done",
                    self.store.shown,
                    self.reopen,
                    self.store.where(MARKER),
                )
                with self._cond:
                    self._status.reopened = True
            self._complete = False

    # -- helpers (call with the lock held where noted) ---------------------------------------------------

    def _add(self, item: LocalShard) -> None:
        """Queue ``item`` unless already known (lock held)."""
        if item.name in self._known:
            return
        self._known.add(item.name)
        self._queue.append(item)
        self._queued_at.setdefault(item.name, time.monotonic())
        self._status.local_shards += 1

    def _conflict(self, name: str, why: str) -> None:
        """Record a shard that cannot be uploaded (lock held)."""
        self._status.conflicts[name] = why
        log.error("not uploading %s to %s: %s", name, self.store.shown, why)

    def _snapshot(self) -> UploadStatus:
        s = self._status
        since = [self._queued_at[i.name] for i in self._queue if i.name in self._queued_at]
        return UploadStatus(
            remote=s.remote,
            local_shards=s.local_shards,
            uploaded=s.uploaded,
            already=s.already,
            pending=len(self._queue),
            pending_bytes=sum(i.bytes for i in self._queue),
            oldest_pending_s=max(0.0, time.monotonic() - min(since)) if since else None,
            failing=self._failing,
            conflicts=dict(s.conflicts),
            bytes=s.bytes,
            put_seconds=s.put_seconds,
            retries=s.retries,
            deleted=s.deleted,
            last_error=s.last_error,
            fatal=s.fatal,
            marker=s.marker,
            was_complete=s.was_complete,
            reopened=s.reopened,
            done_marker=s.done_marker,
            ready=s.ready,
        )

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        """Call ``fn`` until it succeeds; StoreUnavailable is retried with exponential backoff."""
        up = self.spec.upload
        failures = 0
        while True:
            try:
                result = fn()
            except StoreUnavailable as exc:
                failures += 1
                delay = backoff(failures, up.backoff_base_s, up.backoff_max_s)
                self._note_failure(what, exc, delay)
                self._wait(delay)
                continue
            if self._failing:
                self._failing = False
                log.info("the store at %s answers again; uploads go on", self.store.shown)
            return result

    def _note_failure(self, what: str, exc: StoreUnavailable, delay: float) -> None:
        with self._cond:
            self._status.retries += 1
            self._status.last_error = str(exc)
        level = logging.WARNING if not self._failing or delay >= self.spec.upload.backoff_max_s else logging.DEBUG
        log.log(level, "%s failed, retrying in %.1f s: %s", what, delay, exc)
        self._failing = True

    def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds unless told to stop; raise _Stopped when the run's deadline passes."""
        end = time.monotonic() + delay
        with self._cond:
            while True:
                if self._abort:
                    raise _Stopped
                now = time.monotonic()
                if self._deadline is not None and now >= self._deadline:
                    raise _Stopped
                if now >= end:
                    return
                limit = end if self._deadline is None else min(end, self._deadline)
                self._cond.wait(limit - now)
