"""Where an upload stands (a copy, safe to read from any thread), and its one line for the end of a run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


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

    def copy(self, **changes: Any) -> UploadStatus:
        """A copy (with its own conflicts) with ``changes``."""
        return dataclasses.replace(self, conflicts=dict(self.conflicts), **changes)

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
