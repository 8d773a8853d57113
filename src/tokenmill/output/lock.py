"""One writer per output directory: an advisory ``flock`` on ``OUT/.lock``, released when the process ends."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from pathlib import Path

from tokenmill.errors import OutputError
from tokenmill.output import layout
from tokenmill.output.fsio import output_error, write_all

log = logging.getLogger(__name__)

# Filesystems without working locks (NFS without a lock daemon, some FUSE mounts) answer with one of these.
_NO_LOCKING = {errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


class DirLock:
    """Held while a process writes to the directory; a second writer gets a clear :class:`OutputError`."""

    def __init__(self, root: Path, name: str = layout.LOCK, shared: bool = False) -> None:
        self.path = root / name
        self.shared = shared  # several holders at once (the partitions of one run), but no exclusive one
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (without waiting) and record this process id in the lock file."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise output_error(exc, "locking", self.path) from exc
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise OutputError(
                f"another tokenmill process{holder} is writing to {self.path.parent}: wait for it to finish "
                "or stop it (two writers would do the same work twice), then rerun"
            ) from None
        except OSError as exc:
            if exc.errno not in _NO_LOCKING:
                os.close(fd)
                raise output_error(exc, "locking", self.path) from exc
            log.warning(
                "%s cannot be locked on this filesystem (%s): make sure only one tokenmill run writes there",
                self.path.parent,
                exc.strerror,
            )
        if not self.shared:  # shared holders would overwrite each other's pid
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                write_all(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the descriptor releases the ``flock``)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
