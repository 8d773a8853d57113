"""The output directory's file primitives (:mod:`tokenmill.fsio`'s, durable), with OS errors as :class:`OutputError`.

Every write goes through here so that a full disk, a permission problem or a read-only mount becomes one
message that names the file and says what to do, and so that a failed append never leaves half a line
behind when the file can be cut back (the next ``open`` repairs it when it cannot).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from tokenmill import fsio
from tokenmill.errors import OutputError
from tokenmill.fsio import write_all


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


def fsync_dir(path: Path) -> None:
    """Make renames and new entries in directory ``path`` durable."""
    try:
        fsio.fsync_dir(path)
    except OSError as exc:
        raise output_error(exc, "syncing directory", path) from exc


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, durably (:func:`tokenmill.fsio.atomic_write`)."""
    try:
        fsio.atomic_write(path, data, durable=True)
    except OSError as exc:
        raise output_error(exc, "writing", path) from exc


def atomic_create(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists, atomically and durably: several processes may try at
    once (the partitions of one run sharing a directory) and exactly one wins. True when this call created it
    (:func:`tokenmill.fsio.create_file`)."""
    try:
        return fsio.create_file(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise output_error(exc, "writing", path) from exc


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

    def release(self) -> None:
        """After :meth:`sync`: the file's pages need not stay cached (:func:`tokenmill.fsio.drop_cache`)."""
        if self._fd is not None:
            fsio.drop_cache(self._fd)

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
