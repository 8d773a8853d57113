"""Who writes an output directory: the pid, host and process start its writer lock holds, and whether it lives.

The writer (:class:`~tokenmill.output.lock.DirLock`) writes its pid on the lock file's first line and this record
(JSON) on the second, with the phase of its run: ``starting`` from the lock to the start of its monitor (and what
it waits for meanwhile: a store that does not answer), then ``running``. ``tokenmill status`` reads it without
taking the lock: on the writer's own host the process is alive when its pid exists and started when the record
says (a pid reused by another process started later, and a reboot changes the boot id); on another host nothing
can be asked, and the caller judges by the event log's age.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import orjson

_PROC = Path("/proc")


def _boot_id() -> str:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``); None when it is not known."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class Holder:
    """The process that took a writer lock."""

    pid: int
    host: str
    started: int | None = None  # its start in clock ticks since boot (None: unknown)
    boot: str = ""  # the host's boot id when it started
    phase: str = ""  # "starting" until the run's monitor starts, then "running" ("": an older lock)
    since: float = 0.0  # the wall clock when the phase was last noted
    waiting: dict[str, object] | None = None  # while starting: what it waits for (the store), and why

    @classmethod
    def me(cls) -> Holder:
        pid = os.getpid()
        return cls(pid, socket.gethostname(), process_start(pid), _boot_id())

    def about(self) -> bytes:
        """The second line of the lock file."""
        data: dict[str, object] = {"host": self.host, "started": self.started, "boot": self.boot}
        data |= {"phase": self.phase, "since": self.since, "waiting": self.waiting}
        return orjson.dumps(data) + b"\n"

    @property
    def here(self) -> bool:
        """Whether it ran on this host."""
        return self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """Whether the process still runs: None on another host (nothing to ask there)."""
        if not self.here:
            return None
        if self.boot and self.boot != _boot_id():
            return False  # the host rebooted since
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it exists, under another user
        started = process_start(self.pid)
        return self.started is None or started is None or started == self.started

    def shown(self) -> str:
        return f"pid {self.pid} on {self.host}"


def read_holder(path: Path) -> Holder | None:
    """The holder a lock file names; None when it names none (no file, a shared or older lock)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    first, _, rest = head.partition(b"\n")
    if not first.strip().isdigit():
        return None
    data: object = None
    with contextlib.suppress(ValueError):
        data = orjson.loads(rest.split(b"\n", 1)[0])
    if not isinstance(data, dict) or not isinstance(data.get("host"), str):
        return None
    started, boot, phase = data.get("started"), data.get("boot"), data.get("phase")
    since, waiting = data.get("since"), data.get("waiting")
    return Holder(
        int(first),
        data["host"],
        started if isinstance(started, int) else None,
        boot if isinstance(boot, str) else "",
        phase if isinstance(phase, str) else "",
        float(since) if isinstance(since, int | float) else 0.0,
        waiting if isinstance(waiting, dict) else None,
    )
