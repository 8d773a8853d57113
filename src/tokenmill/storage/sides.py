"""Copies of the output's other records (failures, skips, event log, job.json) under the prefix's ``_tokenmill/``.

A file (the summary too) is copied again when its size or mtime changed, at most every ``side_interval_s``. They
are the job's own objects, replaced unconditionally.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from tokenmill.storage.prefix import side_name
from tokenmill.storage.retry import Clock, Retrying
from tokenmill.storage.store import Store

log = logging.getLogger(__name__)


class SideCopier:
    """Keeps the remote copies of ``names`` (files of ``out_dir``) current, from the uploader's worker thread."""

    def __init__(
        self, store: Store, out_dir: Path, names: tuple[str, ...], retry: Retrying, clock: Clock, interval_s: float
    ) -> None:
        self.store = store
        self.out_dir = out_dir
        self.names = names
        self._retry = retry
        self._clock = clock
        self._interval_s = interval_s
        self._stamps: dict[str, tuple[int, int]] = {}  # (size, mtime) of each file when it was last copied
        self._last = float("-inf")

    def due(self) -> bool:
        """Whether ``side_interval_s`` has passed since the last :meth:`sync`."""
        return self._clock() - self._last >= self._interval_s

    def sync(self) -> None:
        """Copy each file that changed since its last copy (one that is gone, or cannot be read, is skipped)."""
        self._last = self._clock()
        for local in self.names:
            path = self.out_dir / local
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if self._stamps.get(local) == stamp:
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                log.warning("cannot read %s to copy it to %s: %s", path, self.store.shown, exc)
                continue
            self._retry("write", functools.partial(self.store.replace_bytes, side_name(local), data, None))
            self._stamps[local] = stamp
