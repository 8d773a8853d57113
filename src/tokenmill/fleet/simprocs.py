"""Local simulated servers as child processes (``tokenmill sim``), for the demo, tests and dry runs.

Each server binds 127.0.0.1 on a free port chosen by the OS and announces its URL on its first stdout line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import ServerError

READY_PREFIX = "tokenmill sim listening on "
START_TIMEOUT_S = 60.0


@dataclass
class SimProcess:
    """A running ``tokenmill sim`` child."""

    proc: subprocess.Popen[str]
    url: str
    log_path: Path | None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL at once (crash simulation)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_sim(args: Sequence[str] = (), log_path: Path | None = None, port: int = 0) -> SimProcess:
    """Start one simulated server with extra ``tokenmill sim`` options; returns once it accepts requests."""
    cmd = [sys.executable, "-m", "tokenmill", "sim", "--port", str(port), *args]
    stderr = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    finally:
        if log_path is not None:
            stderr.close()  # type: ignore[union-attr]
    assert proc.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    first = line[0] if line else ""
    if not first.startswith(READY_PREFIX):
        proc.kill()
        proc.wait()
        where = f" (log: {log_path})" if log_path else ""
        raise ServerError(f"simulated server did not start: {' '.join(cmd)}{where}; first output: {first!r}")
    return SimProcess(proc=proc, url=first[len(READY_PREFIX) :].strip(), log_path=log_path)


@contextlib.contextmanager
def sim_fleet(n: int, args: Sequence[str] = (), log_dir: Path | None = None) -> Iterator[list[SimProcess]]:
    """``n`` simulated servers, stopped on exit whatever happens."""
    procs: list[SimProcess] = []
    try:
        for i in range(n):
            log_path = log_dir / f"sim-{i}.log" if log_dir is not None else None
            procs.append(start_sim([*args, "--seed", str(i)], log_path=log_path))
        yield procs
    finally:
        for p in procs:
            p.stop()
