"""One writer per output directory: an advisory ``flock`` on ``OUT/.lock``, released when the process ends; the
writer's pid, host and start are in the file (:mod:`tokenmill.output.holder`) for ``tokenmill status``."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from tokenmill.errors import OutputError
from tokenmill.fsio import FileLock, LockHeld
from tokenmill.output import layout
from tokenmill.output.fsio import output_error
from tokenmill.output.holder import Holder

log = logging.getLogger(__name__)


class DirLock:
    """Held while a process writes to the directory; a second writer gets a clear :class:`OutputError`."""

    def __init__(self, root: Path, name: str = layout.LOCK, shared: bool = False) -> None:
        self.path = root / name
        self.shared = shared  # several holders at once (the partitions of one run), but no exclusive one
        self._lock = FileLock(self.path, shared=shared, about=b"" if shared else Holder.me().about())

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._lock.held

    def acquire(self) -> None:
        """Take the lock (without waiting) and record this process id in the lock file."""
        if self._lock.held:
            return
        try:
            locked = self._lock.acquire()
        except LockHeld as held:
            holder = f" (pid {held.holder})" if held.holder else ""
            raise OutputError(
                f"another tokenmill process{holder} is writing to {self.path.parent}: wait for it to finish "
                "or stop it (two writers would do the same work twice), then rerun"
            ) from None
        except OSError as exc:
            raise output_error(exc, "locking", self.path) from exc
        if not locked:
            log.warning(
                "%s cannot be locked on this filesystem (%s): make sure only one tokenmill run writes there",
                self.path.parent,
                self._lock.unlocked,
            )

    def note(self, phase: str, waiting: dict[str, object] | None = None) -> None:
        """Say in the lock file where the holder's run stands (``starting``, ``running``) and what it waits for."""
        if not self.shared and self._lock.held:
            me = dataclasses.replace(Holder.me(), phase=phase, since=time.time(), waiting=waiting)
            self._lock.rewrite(me.about())

    def release(self) -> None:
        """Give the lock up (closing the descriptor releases the ``flock``)."""
        self._lock.release()
