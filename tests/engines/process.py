"""One server process for the tests: started in its own session on a free loopback port, ready or failed
with its log tail, and stopped as a whole process group.

Engines that cannot listen on port 0 get a port that was free a moment ago; a start that loses the race for
it is retried on another port.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tokenmill.fleet.process import ServerProcess

STOP_GRACE_S = 20.0
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 40
PROBE_PAUSE_S = 0.5


class StartFailed(RuntimeError):
    """The server did not come up; the message quotes its log."""


@dataclass(frozen=True)
class Launch:
    """How to start one server: the command for a port, its environment, and when it counts as ready."""

    name: str  # for messages and the log file name
    command: Callable[[int], Sequence[str]]
    env: dict[str, str | None]  # changes to this process's environment (None removes a variable)
    deadline_s: float
    ready_path: str = "/health"
    ready_log_line: str | None = None  # also wait for this line in the log, when set
    cwd: Path | None = None


def free_port() -> int:
    """A port free right now on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    return tail(path.read_text(errors="replace"), lines) if path.exists() else "(no log)"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _ready(launch: Launch, base_url: str, log_path: Path) -> bool:
    if launch.ready_log_line is not None:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if launch.ready_log_line not in text:
            return False
    return _answers(base_url + launch.ready_path)


@dataclass
class Running:
    """A started server: its process, where it listens, its log and how long it took to come up."""

    proc: ServerProcess
    port: int
    base_url: str
    log_path: Path
    ready_after_s: float

    def stop(self) -> None:
        self.proc.stop(STOP_GRACE_S)


def _wait_ready(launch: Launch, proc: ServerProcess, base_url: str, log_path: Path) -> str | None:
    """None once the server is ready; otherwise why it never became ready."""
    deadline = time.monotonic() + launch.deadline_s
    while not _ready(launch, base_url, log_path):
        if time.monotonic() > deadline:
            return f"not ready after {launch.deadline_s:.0f} s"
        code = proc.wait(PROBE_PAUSE_S)  # the pause between probes; returns at once if the server dies
        if code is not None:
            return f"exited with code {code} before it was ready"
    return None


def start(launch: Launch, workdir: Path) -> Running:
    """Start ``launch`` on a free port and wait until it is ready; StartFailed quotes the log otherwise."""
    workdir.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        log_path = workdir / f"{launch.name}-{port}.log"
        started = time.monotonic()
        # the fleet's own process handling: its own session, so stopping it reaches every child
        proc = ServerProcess(launch.command(port), launch.env, log_path, cwd=launch.cwd or workdir)
        proc.start()
        try:
            problem = _wait_ready(launch, proc, base_url, log_path)
        except BaseException:
            proc.stop(STOP_GRACE_S)
            raise
        if problem is None:
            return Running(proc, port, base_url, log_path, time.monotonic() - started)
        proc.stop(STOP_GRACE_S)
        text = log_tail(log_path)
        failures.append(f"{launch.name} on port {port} {problem}; log {log_path}, last lines:\n{text}")
        if "address already in use" not in text.lower():
            break  # only a lost race for the port is worth another try
    raise StartFailed("\n\n".join(failures))


def clean_env(**extra: str) -> dict[str, str | None]:
    """Changes to this process's environment for an engine: no test-venv Python settings, plus ``extra``."""
    return {"PYTHONPATH": None, "VIRTUAL_ENV": None, **extra}


def require_venv(venv: Path, stamp: str, require_env: str, what: str, make: str) -> Path:
    """The interpreter of an engine's environment; skips its tests when it is missing, or fails them when
    ``require_env`` says they must run (``make test`` sets it)."""
    if not venv.is_dir():
        reason = f"{what} is not installed ({venv} is missing); run `{make}`"
        if os.environ.get(require_env, "") not in ("", "0"):
            pytest.fail(f"{reason}. {require_env} is set, so these tests must run.", pytrace=False)
        pytest.skip(reason)
    if not any(venv.glob(stamp)):
        pytest.fail(f"{venv} has no install stamp (an interrupted install?); run `{make}`", False)
    return venv / "bin" / "python"
