"""File primitives every package shares: the one atomic write, create-if-absent, a file lock, a page-cache drop.

OS errors escape as :class:`OSError`; each caller turns them into its own error at its boundary (the output
directory's in :mod:`tokenmill.output.fsio`). ``durable=True`` is for what must survive a machine loss (shards,
manifests, ``job.json``, the fleet's state): the temporary file is fsynced before it is renamed over, and the
directory after, so the new name and its bytes are on disk when the call returns. Without it the write is only
atomic: a reader sees the old file or the new one, never half of one (the endpoints file, a port file).

A temporary file is the target's name, a tag of its own and ``.tmp`` (what :func:`is_temporary` recognises, so
that what an interrupted write leaves behind can be swept), unless the caller names its own.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

# Filesystems that cannot fsync a directory say so with one of these; the rename is still atomic there.
_DIR_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF, errno.EISDIR}
# Filesystems without hard links answer ``os.link`` with one of these (create_file then renames instead).
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}
# Filesystems without working locks (NFS without a lock daemon, some FUSE mounts) answer with one of these.
NO_LOCKING = frozenset({errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})
TMP = ".tmp"


def temporary(path: Path) -> Path:
    """A temporary sibling of ``path`` of this call's own (two writers of one file never share one)."""
    return path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP}")


def is_temporary(name: str, of: str) -> bool:
    """Whether ``name`` is what an interrupted atomic write of ``of`` (a file name) can leave behind."""
    return name == of + TMP or (name.startswith(of + ".") and name.endswith(TMP))


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (short writes happen near a full disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def drop_cache(fd: int) -> None:
    """Tell the OS that the pages of ``fd``'s file, written and fsynced, will not be read again soon
    (``POSIX_FADV_DONTNEED``, as PostgreSQL does for a WAL segment it closes), so they are freed at once. A run
    writes its whole corpus once (gigabytes); without this every byte stays in the page cache and the kernel
    work of finding memory for the next writes grows with it (docs/output.md: what the writer costs). Advice
    only: where the OS has no such call, or refuses it, nothing changes."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def fsync_dir(path: Path) -> None:
    """Make renames and new entries in directory ``path`` durable (a filesystem that cannot is let be)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIR_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path, *, durable: bool = False, tmp: Path | None = None) -> Iterator[BinaryIO]:
    """Write ``path`` through a temporary sibling that replaces it when the block ends without an error (the
    temporary file is removed when it raises). ``durable``: fsync the file before the rename, the directory
    after."""
    tmp = tmp or temporary(path)
    try:
        with tmp.open("wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write(path: Path, data: bytes, *, durable: bool = False, tmp: Path | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_file`)."""
    with atomic_file(path, durable=durable, tmp=tmp) as fh:
        fh.write(data)


def create_file(path: Path, write: Callable[[BinaryIO], object], *, tmp: Path | None = None) -> bool:
    """Create ``path`` unless it exists, atomically and durably: several processes may try at once and exactly
    one wins (True for it). ``write`` fills a temporary file of this call's own, which is fsynced, then
    hard-linked into place (a link fails when the name exists); on a filesystem without hard links it is
    renamed into place instead."""
    tmp = tmp or temporary(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            if path.exists():
                return False
            os.replace(tmp, path)
        fsync_dir(path.parent)
        return True
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is its pid as it wrote it ("" when unknown)."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path} is locked by {holder or 'another process'}")


class FileLock:
    """An advisory ``flock`` on one file, taken without waiting and released when the process ends. An exclusive
    holder writes its pid into the file's first line (for the refusal of the next one), then ``about``; shared
    holders leave it alone."""

    def __init__(self, path: Path, *, shared: bool = False, about: bytes = b"") -> None:
        self.path = path
        self.shared = shared
        self.about = about  # written after the pid line by an exclusive holder (who it is, for readers)
        self.unlocked: str | None = None  # why the filesystem could not lock the file held (None: locked)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock (or, on a filesystem without locks, its file)."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock: True when it is a real lock, False on a filesystem that cannot lock (the file is held
        open all the same). :class:`LockHeld` when another process has it; other OS errors escape."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        locked = True
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LockHeld(self.path, holder) from None
        except OSError as exc:
            if exc.errno not in NO_LOCKING:
                os.close(fd)
                raise
            locked = False
            self.unlocked = exc.strerror or str(exc)
        if not self.shared:  # shared holders would overwrite each other's pid
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode() + self.about, 0)
        self._fd = fd
        return locked

    def rewrite(self, about: bytes) -> None:
        """Replace what an exclusive holder wrote after its pid line (best effort: readers only show it)."""
        self.about = about
        if self._fd is None or self.shared:
            return
        with contextlib.suppress(OSError):
            data = f"{os.getpid()}\n".encode() + about
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))

    def release(self) -> None:
        """Give the lock up (closing the descriptor releases the ``flock``)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").split("\n", 1)[0].strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
