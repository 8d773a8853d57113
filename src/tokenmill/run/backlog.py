"""Uploads too far behind (``output.upload.max_backlog``): when a run pauses generation, and when it resumes.

Past the backlog (sealed shards, or their bytes, waiting for upload) the runner holds the dispatcher: no new
prompt is taken, requests in flight finish. It resumes once the backlog is down to half the limit, so a run
at the limit does not pause and resume with every shard sealed.
"""

from __future__ import annotations

from collections.abc import Callable

from tokenmill.config import UploadSpec
from tokenmill.storage.upload import UploadStatus


class Backlog:
    """Reads the uploader's status and says why generation must pause now (None: it need not)."""

    def __init__(self, status: Callable[[], UploadStatus], spec: UploadSpec) -> None:
        self.status = status
        self.shards, self.bytes = spec.backlog_limit()
        self.paused = False

    @property
    def enabled(self) -> bool:
        return self.shards is not None or self.bytes is not None

    def why(self) -> str | None:
        """The reason to hold generation, or None."""
        if not self.enabled:
            return None
        up = self.status()
        over, drained = False, True
        if self.shards is not None:
            over |= up.pending > self.shards
            drained &= up.pending <= self.shards // 2
        if self.bytes is not None:
            over |= up.pending_bytes > self.bytes
            drained &= up.pending_bytes <= self.bytes // 2
        if over or (self.paused and not drained):
            self.paused = True
            limit = f"{self.shards} shards" if self.shards is not None else f"{(self.bytes or 0) / 1e6:,.0f} MB"
            error = f"; the store says: {up.last_error}" if up.failing and up.last_error else ""
            return (
                f"{up.pending} shard(s) ({up.pending_bytes / 1e6:,.1f} MB) wait for upload to {up.remote}, past "
                f"output.upload.max_backlog ({limit}){error}; generation resumes when half of it is uploaded"
            )
        self.paused = False
        return None
