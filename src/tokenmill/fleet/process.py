"""One server process: started in its own session with its log appended to a file, stopped as a group.

The child is started with a parent-death signal (Linux), so a supervisor that is killed outright does not
leave servers holding GPUs and ports behind. Stopping sends SIGTERM to the whole process group (engines
start helper processes), waits, then SIGKILLs what is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tokenmill.errors import ServerError
from tokenmill.fleet.template import redact

_PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None] | None:
    """A pre-resolved ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` for the child, or None off Linux."""
    if not hasattr(os, "sched_getaffinity"):  # not Linux
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return set_death_signal


_SET_DEATH_SIGNAL = _death_signal_setter()


def server_env(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """This process's environment with ``overrides`` applied (None removes a variable)."""
    env = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file (or a note that there is none)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class ServerProcess:
    """A server child process whose stdout and stderr go to ``log_path`` (appended)."""

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str | None], log_path: Path, cwd: Path | None = None
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, note: str = "") -> None:
        """Launch the command; ``ServerError`` when it cannot even be executed."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"--- {stamp} tokenmill fleet: starting{note}: {redact(self.argv)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=server_env(self.env),
                    cwd=self.cwd,
                    start_new_session=True,
                    preexec_fn=_SET_DEATH_SIGNAL,  # only a pre-resolved prctl call runs in the child
                )
            except OSError as exc:
                raise ServerError(
                    f"cannot run {self.argv[0]!r}: {exc.strerror or exc}; check the profile's python/command"
                ) from exc

    def poll(self) -> int | None:
        """The exit code, or None while it runs (or before it started)."""
        return self.proc.poll() if self.proc is not None else None

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to exit; its exit code, or None if it still runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL the group. Returns the exit code."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # session leader: its pid is the group id
        if self.proc.poll() is None:
            self._signal_group(pgid, signal.SIGTERM)
        code = self.wait(grace_s)
        deadline = time.monotonic() + min(grace_s, 5.0)
        while _group_alive(pgid) and time.monotonic() < deadline:  # helpers may outlive the main process
            time.sleep(0.05)
        if _group_alive(pgid):
            self._signal_group(pgid, signal.SIGKILL)
        if code is None:
            code = self.proc.wait()
        return code

    def kill(self) -> None:
        """SIGKILL the whole group at once (crash simulation, or a stop that must not wait)."""
        if self.proc is not None:
            self._signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
