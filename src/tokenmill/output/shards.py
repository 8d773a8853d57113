"""The shard writer: completions appended to an open shard, sealed every ``shard_size`` records.

Sealing a shard is: flush, fsync, rename ``completions_N.jsonl.open`` to ``completions_N.jsonl``, fsync the
directory, then append (and fsync) its manifest line. A crash at any point leaves either an open shard
(continued on the next run, its torn last line cut) or a sealed shard with or without its manifest line
(the line is re-derived on the next open). Failures and skips go to ``failed.jsonl`` and ``skipped.jsonl``.

Typical use by the runner::

    out = OutputDir(job.output.dir, job.output.shard_size, on_seal=uploader.enqueue)
    state = out.open()                       # what is done; repairs crash damage
    ... out.write(completion) / out.fail(failure) / out.skip(skip); out.flush() every ~0.5 s ...
    out.close(seal=True)                     # end of the job: seal the partial shard too

Not thread-safe: call it from one thread (the event loop). After an :class:`OutputError` the directory is
left consistent and every later call raises the same error; rerunning the job repairs and continues.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill import records
from tokenmill.config import OutputSpec
from tokenmill.errors import ConfigError, OutputError
from tokenmill.output import layout
from tokenmill.output.fsio import AppendFile, fsync_dir, output_error, rename
from tokenmill.output.lock import DirLock
from tokenmill.output.manifest import ManifestEntry
from tokenmill.output.resume import OpenShard, ResumeState, recover
from tokenmill.records import Completion, Failure, Skip

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE: int = OutputSpec.model_fields["shard_size"].default

# Buffered shard bytes are handed to the OS at this size even between the runner's periodic flushes, so a burst
# of long completions cannot pile up in memory, and while the lines are still in the CPU's cache: the kernel's
# copy of a 4 MB buffer cost 2-3x more CPU per record than of a 256 KB one (bench/overhead.py).
_FLUSH_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class SealedShard:
    """A shard that has just been sealed (renamed into place, fsynced, listed in the manifest)."""

    path: Path
    name: str
    count: int
    bytes: int
    sha256: str
    line: builtins.bytes = b""  # its manifest line (ids included), which the remote index copies


class _Shard:
    """The open shard: its file plus what its manifest line will say."""

    def __init__(self, index: int, path: Path, sha: Any, ids: list[str], tokens: tuple[int, int]) -> None:
        self.index = index
        self.file = AppendFile(path)
        self.sha = sha
        self.ids = ids
        self.prompt_tokens, self.completion_tokens = tokens

    def add(self, rec: Completion, key: str, line: bytes) -> None:
        self.file.append(line)
        self.sha.update(line)
        self.ids.append(key)
        self.prompt_tokens += rec.prompt_tokens or 0
        self.completion_tokens += rec.completion_tokens or 0


class OutputDir:
    """Durable, exactly-once output: shards, manifest, failures and skips in one directory."""

    def __init__(
        self,
        path: str | Path,
        shard_size: int = DEFAULT_SHARD_SIZE,
        on_seal: Callable[[SealedShard], None] | None = None,
        partition: int | None = None,
    ) -> None:
        """``partition``: write this partition's files of a partitioned run (see :mod:`.layout`)."""
        if shard_size < 1:
            raise ConfigError(f"output.shard_size must be at least 1 (got {shard_size})")
        self.root = Path(path)
        self.shard_size = shard_size
        self.on_seal = on_seal
        self.duplicates = 0  # records dropped because their id was already done
        self._state: ResumeState | None = None
        self._closed = False
        self._broken: OutputError | None = None
        self.names = layout.Names(partition)
        self._lock = DirLock(self.root, self.names.lock)
        # partitions share the directory with each other, never with a writer of the default files
        self._shared_lock = DirLock(self.root, layout.LOCK, shared=True) if partition is not None else None
        self._shard: _Shard | None = None
        self._next_index = 0
        self._failed = AppendFile(self.root / self.names.failed)
        self._failed_ids: set[str] = set()
        self._skipped = AppendFile(self.root / self.names.skipped)
        self._manifest = AppendFile(self.root / self.names.manifest)

    @property
    def state(self) -> ResumeState:
        """The live resume state (counts and done set kept current by the writes)."""
        if self._state is None:
            raise OutputError(f"{self.root} is not open: call open() first")
        return self._state

    def note(self, phase: str, waiting: dict[str, object] | None = None) -> None:
        """Say in the writer lock where the run stands, for ``tokenmill status`` (:meth:`DirLock.note`)."""
        self._lock.note(phase, waiting)

    def lock(self) -> None:
        """Create the directory if needed and take the writer lock (what :meth:`open` does first; call it alone
        to change the directory before it is opened, e.g. to take records over from the remote copy)."""
        _make_dir(self.root)
        self._lock.acquire()
        try:
            if self._shared_lock is not None:
                self._shared_lock.acquire()
        except BaseException:
            self._release()
            raise

    def open(self) -> ResumeState:
        """Create the directory if needed, take the writer lock, repair crash damage, load what is done."""
        if self._state is not None:
            return self._state
        self.lock()
        try:
            rec = recover(self.root, self.names.partition)
            self._state = rec.state
            self._failed_ids = rec.failed_ids
            self._next_index = rec.next_index
            if rec.open_shard is not None:
                self._continue(rec.open_shard)
        except BaseException:
            self._release()
            self._state = None
            self._shard = None
            raise
        return rec.state

    def write(self, rec: Completion) -> None:
        """Append one completion (buffered); seals the shard when it reaches ``shard_size``."""
        state = self._usable()
        key = rec.key  # the canonical id: an integer id as its decimal string
        if key in state.done:
            self._drop(key, "completion")
            return
        line = records.encode(rec)
        shard = self._shard or self._start_shard()
        shard.add(rec, key, line)
        state.done.add(key)
        state.completed += 1
        state.open_count += 1
        state.prompt_tokens += rec.prompt_tokens or 0
        state.completion_tokens += rec.completion_tokens or 0
        if len(shard.ids) >= self.shard_size or shard.file.pending >= _FLUSH_BYTES:
            with self._guard():  # only here can a write fail (the rest above is memory only)
                if len(shard.ids) >= self.shard_size:
                    self._seal(shard)
                else:
                    shard.file.flush()

    def fail(self, rec: Failure) -> None:
        """Record a prompt that could not be completed (made durable by the next :meth:`flush`)."""
        state = self._usable()
        key = rec.key
        if key in state.done:
            self._drop(key, "failure")
            return
        self._failed.append(records.encode(rec))
        self._failed_ids.add(key)
        state.done.add(key)
        state.failed += 1

    def skip(self, rec: Skip) -> None:
        """Record a skipped input row once (a rerun skipping the same row again writes nothing)."""
        state = self._usable()
        if rec.source in state.skipped_sources:
            return
        self._skipped.append(records.encode(rec))
        state.skipped_sources.add(rec.source)

    def flush(self) -> None:
        """Hand buffered completions to the OS; make buffered failures and skips durable (fsync)."""
        self._usable()
        with self._guard():
            if self._shard is not None:
                self._shard.file.flush()
            for log_file in (self._failed, self._skipped):
                if log_file.pending:
                    log_file.sync()

    def close(self, seal: bool) -> None:
        """Flush and fsync everything; with ``seal`` also seal a non-empty open shard. Idempotent. A directory
        only locked (never opened) is released."""
        if self._state is None:
            self._release()
            return
        if self._closed:
            return
        try:
            if self._broken is None:
                with self._guard():
                    self._finish(seal)
        finally:
            self._closed = True
            self._release()

    def archive_failed(self) -> Path | None:
        """Move ``failed.jsonl`` to ``failed.retry-<n>.jsonl`` so its prompts are attempted again.

        Call it before :meth:`open` (or after, when the done set and counts are updated too). Returns
        the new path, or None when there were no failures.
        """
        opened = self._state is not None
        if opened:
            self._usable()
            with self._guard():
                self._failed.sync()
        elif not self.root.is_dir():
            return None
        elif self.names.partition is not None:
            raise ConfigError("retry failed prompts without --partitions (failures of every partition are moved)")
        else:
            self._lock.acquire()
        try:
            moved = self._move_failed()
        finally:
            if not opened:
                self._lock.release()
        if opened and moved is not None:
            state = self.state
            state.done.difference_update(self._failed_ids)
            state.failed = 0
            self._failed_ids = set()
        return moved

    # -- internals -------------------------------------------------------------------------------------

    def _usable(self) -> ResumeState:
        if self._broken is not None:
            raise self._broken
        if self._closed:
            raise OutputError(f"{self.root} was closed; open a new OutputDir to write more")
        return self.state

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Remember the first write error: later calls raise it instead of writing past a failure."""
        try:
            yield
        except OutputError as exc:
            self._broken = exc
            raise

    def _drop(self, rid: str, what: str) -> None:
        self.duplicates += 1
        log.warning("%s for id %r dropped: that id is already done in %s", what, rid, self.root)

    def _release(self) -> None:
        """Close every descriptor and give the lock up."""
        for f in (self._failed, self._skipped, self._manifest):
            f.close()
        if self._shard is not None:
            self._shard.file.close()
        self._lock.release()
        if self._shared_lock is not None:
            self._shared_lock.release()

    def _continue(self, found: OpenShard) -> None:
        """Append to the open shard a previous run left; seal it first if it is already full."""
        scan = found.scan
        shard = _Shard(found.index, found.path, scan.prefix_sha, scan.ids, (scan.prompt_tokens, scan.completion_tokens))
        shard.file.size = scan.good_bytes
        self._shard = shard
        if len(shard.ids) >= self.shard_size:  # a crash between its last write and its rename
            self._seal(shard)
            self.state.repaired.append(f"sealed {self.names.shard(shard.index)}, which was full but still open")

    def _start_shard(self) -> _Shard:
        index = self._next_index
        self._next_index += 1
        self._shard = _Shard(index, self.root / self.names.open(index), hashlib.sha256(), [], (0, 0))
        return self._shard

    def _seal(self, shard: _Shard) -> None:
        shard.file.sync()
        shard.file.release()  # written once, read back rarely (an upload, verify): not kept in the page cache
        shard.file.close()
        self._shard = None
        name = self.names.shard(shard.index)
        path = self.root / name
        rename(shard.file.path, path)
        entry = ManifestEntry(
            shard=name,
            count=len(shard.ids),
            bytes=shard.file.size,
            sha256=shard.sha.hexdigest(),
            ids=shard.ids,
            prompt_tokens=shard.prompt_tokens,
            completion_tokens=shard.completion_tokens,
            sealed_at=time.time(),
        )
        line = entry.encode()
        self._manifest.append(line)
        self._manifest.sync()
        state = self.state
        state.shards += 1
        state.open_count = 0
        if self.on_seal is not None:
            self.on_seal(SealedShard(path, name, entry.count, entry.bytes, entry.sha256, line))

    def _finish(self, seal: bool) -> None:
        shard = self._shard
        if shard is not None and seal and shard.ids:
            self._seal(shard)
        elif shard is not None:
            shard.file.sync()
            if seal:
                _remove_empty(shard.file.path)
        self._failed.sync()
        self._skipped.sync()

    def _move_failed(self) -> Path | None:
        """Archive ``failed.jsonl``, and the failures of a partitioned run's writers (``failed.pNNN.jsonl``,
        safe to move: they share ``.lock``, which this writer holds exclusively). Returns the last archive."""
        moved: Path | None = None
        partitions = sorted(layout.list_dir(self.root).partitions)
        for names in [layout.Names(), *(layout.Names(p) for p in partitions)]:
            src = self.root / names.failed
            try:
                size = src.stat().st_size
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise output_error(exc, "reading", src) from exc
            if names.partition is None:
                self._failed.close()
                self._failed = AppendFile(src)
            if size == 0:
                continue
            taken = layout.list_dir(self.root).archived_failed
            moved = self.root / layout.archived_failed_name(max(taken, default=0) + 1)
            rename(src, moved)
        return moved


def _make_dir(root: Path) -> None:
    """Create the output directory (and its parents, the new entry made durable); a file in its place is an error."""
    if root.exists() and not root.is_dir():
        raise OutputError(f"output path {root} exists and is not a directory: choose another output.dir")
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(exc, "creating", root) from exc
    if created:
        fsync_dir(root.parent)


def _remove_empty(path: Path) -> None:
    """Delete an open shard that never got a record (a run that ended right after starting it)."""
    try:
        if path.stat().st_size == 0:
            path.unlink()
            fsync_dir(path.parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise output_error(exc, "removing", path) from exc
