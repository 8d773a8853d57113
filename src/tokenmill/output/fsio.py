"""Durable file primitives for the output directory, with OS errors turned into :class:`OutputError`.

Every write goes through here so that a full disk, a permission problem or a read-only mount becomes one
message that names the file and says what to do, and so that a failed append never leaves half a line
behind when the file can be cut back (the next ``open`` repairs it when it cannot).
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path

from tokenmill.errors import OutputError

# Filesystems that cannot fsync a directory say so with one of these; the rename is still atomic there.
_DIR_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF, errno.EISDIR}


def output_error(exc: OSError, action: str, path: Path) -> OutputError:
    """A user-facing error for ``exc`` raised while ``action`` (e.g. "writing") ``path``."""
    code = exc.errno
    if code == errno.ENOSPC:
        msg = f"disk full while {action} {path}: free space and rerun the same command; nothing is lost"
    elif code == errno.EDQUOT:
        msg = (
            f"disk quota exceeded while {action} {path}: free space or raise the quota, then rerun the "
            "same command; nothing is lost"
        )
    elif code in (errno.EACCES, errno.EPERM):
        msg = (
            f"permission denied while {action} {path}: make the output directory writable (or choose "
            "another output.dir) and rerun the same command; nothing is lost"
        )
    elif code == errno.EROFS:
        msg = (
            f"read-only file system while {action} {path}: remount it writable or choose another "
            "output.dir, then rerun the same command; nothing is lost"
        )
    elif code == errno.EIO:
        msg = f"I/O error while {action} {path}: check the disk (dmesg), then rerun the same command"
    else:
        msg = f"cannot finish {action} {path}: {exc.strerror or exc}; fix the cause and rerun the same command"
    err = OutputError(msg)
    err.__cause__ = exc
    return err


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (short writes happen near a full disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: Path) -> None:
    """Make renames and new entries in directory ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise output_error(exc, "syncing directory", path) from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIR_SYNC_UNSUPPORTED:
            raise output_error(exc, "syncing directory", path) from exc
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a sibling ``.tmp``, fsync it, rename it over, fsync the dir."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        _write_synced(tmp, data, os.O_TRUNC)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise output_error(exc, "writing", path) from exc
    fsync_dir(path.parent)


def atomic_create(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists, atomically: several processes may try at once (the
    partitions of one run sharing a directory) and exactly one wins. True when this call created it.

    The data goes to a temporary file of this process's own, fsynced, then is hard-linked into place (a link
    fails when the name exists); on a filesystem without hard links it is renamed into place instead."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _write_synced(tmp, data, os.O_EXCL)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if path.exists():
                return False
            os.replace(tmp, path)
        fsync_dir(path.parent)
        return True
    except OSError as exc:
        raise output_error(exc, "writing", path) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file ``path`` (``mode``: os.O_TRUNC or os.O_EXCL) and fsync it; OSError escapes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def cut(path: Path, size: int) -> None:
    """Truncate ``path`` to ``size`` bytes and make that durable (repairs a torn last line)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise output_error(exc, "repairing", path) from exc


def rename(src: Path, dst: Path) -> None:
    """Atomically rename ``src`` to ``dst`` and make it durable."""
    try:
        os.rename(src, dst)
    except OSError as exc:
        raise output_error(exc, "renaming", src) from exc
    fsync_dir(dst.parent)


class AppendFile:
    """A buffered, append-only file: :meth:`append` is memory only, :meth:`flush` hands bytes to the OS,
    :meth:`sync` makes them durable. Opened lazily, so an unused file is never created.

    ``size`` is the number of bytes known to be in the file; when a flush fails part-way the file is cut
    back to ``size``, so a short write cannot leave a torn line that later appends would bury.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self._fd: int | None = None
        self._buf = bytearray()
        self._new_entry = False

    @property
    def pending(self) -> int:
        """Bytes appended but not yet handed to the OS."""
        return len(self._buf)

    def append(self, data: bytes) -> None:
        """Queue ``data`` (whole lines) for the next flush."""
        self._buf += data

    def flush(self) -> None:
        """Write the queued bytes; on failure cut the file back to its last whole line and raise."""
        if not self._buf:
            return
        fd = self._ensure_open()
        data, self._buf = self._buf, bytearray()
        try:
            write_all(fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            raise output_error(exc, "writing", self.path) from exc
        self.size += len(data)

    def sync(self) -> None:
        """Flush, then fsync the file (and its directory the first time the file was created)."""
        self.flush()
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise output_error(exc, "syncing", self.path) from exc
        if self._new_entry:
            fsync_dir(self.path.parent)
            self._new_entry = False

    def close(self) -> None:
        """Close the descriptor (queued bytes are dropped: call :meth:`sync` first to keep them)."""
        self._buf = bytearray()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)

    def _ensure_open(self) -> int:
        if self._fd is None:
            existed = self.path.exists()
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                self.size = os.fstat(self._fd).st_size
            except OSError as exc:
                raise output_error(exc, "opening", self.path) from exc
            self._new_entry = not existed
        return self._fd
