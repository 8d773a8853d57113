"""Single simulated servers (``tokenmill sim``) for the demo and tests, without a supervisor.

They are started exactly as a fleet starts its servers (the ``sim`` command template, a
:class:`~tokenmill.fleet.process.ServerProcess`, a health wait), but nothing restarts them: a test that
kills one sees it stay down. For restarts, draining and re-flags use :mod:`tokenmill.fleet.local`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenmill.config import FleetSpec, SimSpec
from tokenmill.errors import ServerError
from tokenmill.fleet import health
from tokenmill.fleet.keeper import PORT_RETRIES, free_port
from tokenmill.fleet.process import ServerProcess, tail
from tokenmill.fleet.template import Slot, render

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
HOST = "127.0.0.1"


@dataclass
class SimProcess:
    """A running ``tokenmill sim`` child."""

    proc: ServerProcess
    url: str
    log_path: Path | None

    def stop(self, timeout: float = STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        self.proc.stop(timeout)

    def kill(self) -> None:
        """SIGKILL at once (crash simulation)."""
        self.proc.kill()


def start_sim(args: Sequence[str] = (), log_path: Path | None = None, port: int = 0) -> SimProcess:
    """Start one simulated server with extra ``tokenmill sim`` options; returns once it is healthy.

    ``port`` 0 picks a free port (retried if another process takes it first).
    """
    profile = FleetSpec(engine="sim", model=SimSpec().model, extra_args=list(args), base_port=port)
    log = log_path if log_path is not None else Path(os.devnull)
    problem = ""
    for _ in range(PORT_RETRIES if port == 0 else 1):
        chosen = port or free_port(HOST)
        proc = ServerProcess(render(profile, Slot(0, (), HOST, chosen)), profile.env, log)
        proc.start()
        url = f"http://{HOST}:{chosen}"
        problem = health.wait_healthy(proc, url, profile.health_path, START_TIMEOUT_S) or ""
        if not problem:
            return SimProcess(proc=proc, url=url, log_path=log_path)
        proc.stop(STOP_GRACE_S)
        last = tail(log, profile.log_tail_lines) if log_path is not None else "(no log kept)"
        problem = f"simulated server on port {chosen} {problem}; last log lines:\n{last}"
        if "address already in use" not in last.lower():
            break
    raise ServerError(problem)


@contextlib.contextmanager
def sim_fleet(n: int, args: Sequence[str] = (), log_dir: Path | None = None) -> Iterator[list[SimProcess]]:
    """``n`` simulated servers (seeds 0..n-1), stopped on exit whatever happens."""
    procs: list[SimProcess] = []
    try:
        for i in range(n):
            log_path = log_dir / f"sim-{i}.log" if log_dir is not None else None
            procs.append(start_sim([*args, "--seed", str(i)], log_path=log_path))
        yield procs
    finally:
        for p in procs:
            p.stop()
