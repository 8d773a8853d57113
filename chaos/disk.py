"""A small disk for the output directory, that can be filled up and freed again.

As root, a tmpfs of ``size_mb`` is mounted at ``WORKDIR/disk``; :meth:`fill` writes a ballast file that
leaves only a few kilobytes free (the next shard write fails with ENOSPC), :meth:`free` deletes it. Without
the right to mount, the output goes to a plain directory and the disk-full fault is skipped (``reason``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path

BALLAST = ".chaos-ballast"
_CHUNK = 1 << 20


class SmallDisk:
    """The mount (or plain directory) holding the run's output."""

    def __init__(self, root: Path, size_mb: int) -> None:
        self.root = root
        self.size_mb = size_mb
        self.mounted = False
        self.reason: str | None = None  # why there is no small disk (the disk-full fault is skipped)

    def mount(self) -> Path:
        """Mount the tmpfs (or fall back to a plain directory); returns the directory to write into."""
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self.reason = "not root: cannot mount a small tmpfs, so the disk-full fault is skipped"
            return self.root
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(self.root)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if res.returncode != 0:
            self.reason = f"mount -t tmpfs failed ({res.stderr.strip()}), so the disk-full fault is skipped"
            return self.root
        self.mounted = True
        return self.root

    @property
    def free_bytes(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def fill(self, leave_bytes: int) -> int:
        """Write a ballast file until only about ``leave_bytes`` are free; returns the ballast size."""
        want = max(0, self.free_bytes - leave_bytes)
        written = 0
        chunk = b"\0" * _CHUNK
        with (self.root / BALLAST).open("ab") as fh:
            while written < want:
                n = min(_CHUNK, want - written)
                try:
                    fh.write(chunk[:n])
                    fh.flush()
                except OSError as exc:  # the client wrote meanwhile: full is what we wanted
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n
        return written

    def free(self) -> None:
        """Delete the ballast: the space is back."""
        (self.root / BALLAST).unlink(missing_ok=True)

    def keep_copy(self, src: Path, dest: Path) -> None:
        """Copy ``src`` (the output) out of the tmpfs before it goes (for a look after a failed run)."""
        with contextlib.suppress(OSError):
            shutil.copytree(src, dest, dirs_exist_ok=True)

    def unmount(self) -> None:
        """Unmount (lazily if busy); the tmpfs content is gone after this."""
        if not self.mounted:
            return
        res = subprocess.run(["umount", str(self.root)], capture_output=True, timeout=30)
        if res.returncode != 0:
            subprocess.run(["umount", "-l", str(self.root)], capture_output=True, timeout=30)
        self.mounted = False
