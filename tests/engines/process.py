"""One server process for the tests: started in its own session on a free loopback port, ready or failed
with its log tail, and stopped as a whole process group.

Engines that cannot listen on port 0 get a port that was free a moment ago; a start that loses the race for
it is retried on another port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    env: dict[str, str]
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


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, wait for it, then SIGKILL whatever is left."""
    pgid = proc.pid  # session leader: its pid is the group id
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    while _group_alive(pgid) and time.monotonic() < deadline:  # children may outlive the leader
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    proc.wait()


@dataclass
class Running:
    """A started server: its process, where it listens, its log and how long it took to come up."""

    proc: subprocess.Popen[bytes]
    port: int
    base_url: str
    log_path: Path
    ready_after_s: float

    def stop(self) -> None:
        stop_group(self.proc)


def _wait_ready(launch: Launch, proc: subprocess.Popen[bytes], base_url: str, log_path: Path) -> str | None:
    """None once the server is ready; otherwise why it never became ready."""
    deadline = time.monotonic() + launch.deadline_s
    while not _ready(launch, base_url, log_path):
        if time.monotonic() > deadline:
            return f"not ready after {launch.deadline_s:.0f} s"
        try:
            code = proc.wait(timeout=PROBE_PAUSE_S)  # the pause between probes; returns at once if it dies
        except subprocess.TimeoutExpired:
            continue
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
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                list(launch.command(port)),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=launch.env,
                cwd=launch.cwd or workdir,
                start_new_session=True,  # its own process group, so stopping it reaches every child
            )
        try:
            problem = _wait_ready(launch, proc, base_url, log_path)
        except BaseException:
            stop_group(proc)
            raise
        if problem is None:
            return Running(proc, port, base_url, log_path, time.monotonic() - started)
        stop_group(proc)
        text = log_tail(log_path)
        failures.append(f"{launch.name} on port {port} {problem}; log {log_path}, last lines:\n{text}")
        if "address already in use" not in text.lower():
            break  # only a lost race for the port is worth another try
    raise StartFailed("\n\n".join(failures))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the test venv's Python settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env
