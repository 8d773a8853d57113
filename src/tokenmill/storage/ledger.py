"""One writer's ledger at the remote prefix: the claim, its manifest and tag, the index segments, the markers.

The ledger holds the writer's manifest and the tag to replace it with, the index segments holding the ids of
the shards it lists, and the markers of a finished job (``_SUCCESS``, a partition's done marker).

The uploader (:mod:`tokenmill.storage.upload`) drives it from its worker thread: :meth:`RemoteLedger.open`
claims the prefix and reads what is there, :meth:`RemoteLedger.reconcile` says which local shards it already holds,
:meth:`RemoteLedger.add` lists an uploaded shard, :meth:`RemoteLedger.write` puts the new index segment and then
the manifest (so a manifest never lists a shard whose ids are not indexed), at most every
``manifest_interval_s`` (:meth:`RemoteLedger.due`). Every store call goes through the caller's retry loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tokenmill.errors import StoreConflict, StoreUnavailable
from tokenmill.output import SealedShard, layout, manifest, offload
from tokenmill.output.manifest import ManifestEntry
from tokenmill.storage import complete, index
from tokenmill.storage.prefix import (
    MARKER,
    RemoteManifest,
    RemoteShard,
    claim,
    done_marker,
    index_name,
    writer_manifest,
)
from tokenmill.storage.retry import Clock, Retrying
from tokenmill.storage.store import Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Reconciled:
    """The local shards against the remote manifest: what is there already, what is in the way, what to upload."""

    there: list[str] = field(default_factory=list)  # listed with the same content, and the object is there
    conflicting: list[str] = field(default_factory=list)  # listed with other content under the same name
    missing: list[SealedShard] = field(default_factory=list)  # to upload (or adopt when the object is there)


class RemoteLedger:
    """The remote bookkeeping of one writer (the default writer, or partition ``writer``) of one job."""

    def __init__(
        self,
        store: Store,
        out_dir: Path,
        writer: int | None,
        retry: Retrying,
        clock: Clock,
        interval_s: float,
    ) -> None:
        self.store = store
        self.out_dir = out_dir
        self.writer = writer
        self.names = layout.Names(writer)
        self.head_name = writer_manifest(writer)
        self.job_id = ""
        self.manifest = RemoteManifest(job_id="")
        self.tag: str | None = None
        self.dirty = False  # shards are listed that the remote manifest does not list yet
        self.done_seen = False  # this partition's done marker is at the prefix
        self.complete = False  # this job's _SUCCESS is at the prefix
        self._retry = retry
        self._clock = clock
        self._interval_s = interval_s
        self._last_write = float("-inf")
        self._unindexed: dict[str, bytes] = {}  # manifest lines of shards the remote index does not hold yet
        self._deletable: list[SealedShard] = []  # verified remote copies, deleted once the manifest lists them

    def open(self, job_id: str, allow_existing: bool) -> dict[str, int]:
        """Claim the prefix for ``job_id`` (a refusal is :class:`StoreConflict`), sweep what a killed local put
        left, read the writer's manifest (creating it) and the markers; returns the prefix's listing."""
        self.job_id = job_id
        claimed = self._retry("claim", lambda: claim(self.store, job_id, allow_existing))
        if claimed.created:
            log.info("claimed %s for job %s", self.store.shown, job_id)
        if claimed.foreign:
            log.info("%s holds %d object(s) of someone else; they are left alone", self.store.shown, claimed.foreign)
        listing = self._retry("list", self.store.list)
        self._retry("clean", self.store.remove_partials)
        if self.writer is None:
            self.manifest, self.tag = claimed.manifest, claimed.tag
        else:
            self.manifest, self.tag = self._retry("read", self._head)
        self.done_seen = self.writer is not None and done_marker(self.writer) in listing
        self.complete = MARKER in listing and self._retry("read", lambda: complete.is_ours(self.store, job_id))
        return listing

    def reconcile(self, local: dict[str, ManifestEntry], listing: dict[str, int]) -> Reconciled:
        """Which of the local manifest's shards the prefix holds (a manifest an earlier version wrote, with no
        index, gets the lines of the shards it lists indexed on the next write)."""
        remote = self.manifest
        if remote.shards and not remote.index:
            self._unindexed = {n: e.encode() for n, e in local.items() if n in remote.shards}
            self.dirty = bool(self._unindexed)
        out = Reconciled()
        for entry in sorted(local.values(), key=lambda e: e.shard):
            there = remote.shards.get(entry.shard)
            if there is not None and there.sha256 == entry.sha256 and listing.get(entry.shard) == entry.bytes:
                out.there.append(entry.shard)
            elif there is not None and there.sha256 != entry.sha256:
                out.conflicting.append(entry.shard)
            else:
                out.missing.append(
                    SealedShard(
                        path=self.out_dir / entry.shard,
                        name=entry.shard,
                        count=entry.count,
                        bytes=entry.bytes,
                        sha256=entry.sha256,
                        line=entry.encode(),
                    )
                )
        return out

    def add(self, shard: SealedShard, delete: bool = False) -> None:
        """``shard`` is at the prefix: list it in the next manifest (and its ids in the next index segment);
        ``delete``: its copy was read back, delete the local file once the manifest lists it."""
        self.manifest.shards[shard.name] = RemoteShard(shard.count, shard.bytes, shard.sha256)
        self._unindexed[shard.name] = shard.line or self._line_of(shard.name)
        if delete:
            self._deletable.append(shard)
        self.dirty = True

    def due(self) -> float | None:
        """Seconds until the remote manifest should be rewritten (<= 0: now), None when it is current."""
        if not self.dirty:
            return None
        return self._last_write + self._interval_s - self._clock()

    def write(self) -> int:
        """Put the index segment of the shards listed since the last write, then the manifest (If-Match on its
        tag: another writer's change is a :class:`StoreConflict`); then delete the local shards it now lists
        that were to be deleted (each recorded in ``offloaded.jsonl`` first). Returns how many were."""
        current = self.manifest
        self._write_index(current)

        def put() -> None:
            self.store.replace_bytes(self.head_name, current.encode(), self.tag)
            found = self.store.read(self.head_name)
            self.tag = found.tag if found else None

        self._retry("write", put)
        self.dirty = False
        self._last_write = self._clock()
        deleted, self._deletable = self._deletable, []
        for shard in deleted:
            offload.record(self.out_dir, shard.name, shard.sha256, self.store.where(shard.name))
            shard.path.unlink(missing_ok=True)
        if deleted:
            log.info("deleted %d local shard(s) after a verified upload", len(deleted))
        return len(deleted)

    def refuse_finished(self, new: int) -> None:
        """The prefix says the job is finished: ``new`` shards not at the prefix are not added silently."""
        if self.complete and new:
            raise StoreConflict(
                f"{self.store.where(MARKER)} says this job is finished, but {new} sealed shard(s) of {self.out_dir} "
                "are not at the prefix (written by a run that did not upload, e.g. a trial, after the job was "
                "finished). A finished job is not reopened silently: rerun with --reopen to add them "
                f"({MARKER} is withdrawn until the job is done again)"
            )

    def withdraw_markers(self, reopen: str | None) -> bool:
        """New shards are coming: a partition's done marker goes down first; so does this job's ``_SUCCESS`` when
        the run was asked to reopen the finished job (``reopen`` says why; the uploader never adds a shard to a
        finished job otherwise). True when ``_SUCCESS`` was withdrawn."""
        if self.done_seen:
            writer = self.writer
            assert writer is not None
            if self._retry("delete", lambda: complete.withdraw_done(self.store, writer)):
                log.info("withdrew %s until the new shards are uploaded", self.store.where(done_marker(writer)))
            self.done_seen = False
        if not self.complete:
            return False
        self.complete = False
        if not self._retry("delete", lambda: complete.withdraw_success(self.store, self.job_id)):
            return False
        log.warning(
            "REOPENED the finished job at %s (%s): withdrew %s; it is written again when the job is done",
            self.store.shown,
            reopen,
            self.store.where(MARKER),
        )
        return True

    def write_success(self) -> None:
        """Mark the whole job complete with ``_SUCCESS`` (the default writer, every shard up)."""
        wrote = self._retry("write", lambda: complete.write_success(self.store, self.job_id))
        if wrote is None:
            raise StoreConflict(
                f"{self.store.where(MARKER)} was not written by this job and is not replaced; every shard and "
                "the manifest are uploaded, but the prefix has no marker of this job"
            )
        if wrote == "kept":
            log.info("%s is there already and left as it is (nothing new)", self.store.where(MARKER))
        elif wrote == "corrected":
            log.warning(
                "%s disagreed with the prefix's manifests and failure copies: rewritten with their totals",
                self.store.where(MARKER),
            )
        else:
            log.info("wrote %s", self.store.where(MARKER))

    def mark_done(self, partition: tuple[int, int], counts: dict[str, int]) -> bool:
        """Mark partition (index, count) done; True when that made every partition done (``_SUCCESS`` written)."""
        index_, count = partition
        whole = self._retry("write", lambda: complete.mark_done(self.store, self.job_id, index_, count, counts))
        log.info(
            "partition %d of %d is done at %s%s",
            index_,
            count,
            self.store.shown,
            f"; every partition is: wrote {self.store.where(MARKER)}" if whole else "",
        )
        return whole

    def _head(self) -> tuple[RemoteManifest, str | None]:
        """This partition's manifest, created (empty) when it has none yet."""
        found = self.store.read(self.head_name)
        if found is None:
            self.store.put_bytes_if_absent(self.head_name, RemoteManifest(job_id=self.job_id).encode())
            found = self.store.read(self.head_name)
            if found is None:
                raise StoreUnavailable(f"{self.store.where(self.head_name)} is not there right after it was written")
        head = RemoteManifest.decode(found.data, self.store.where(self.head_name))
        if head.job_id != self.job_id:
            raise StoreConflict(
                f"{self.store.where(self.head_name)} belongs to another job (job id {head.job_id}); this is job "
                f"{self.job_id}: use another output.remote prefix"
            )
        return head, found.tag

    def _line_of(self, shard: str) -> bytes:
        entry = manifest.read(self.out_dir / self.names.manifest).entries.get(shard)
        return entry.encode() if entry is not None else b""

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
