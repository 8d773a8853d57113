"""The client under test: ``tokenmill run JOB`` as a child process, started, watched and killed; one
:class:`Start` per process, with what it achieved and how it ended."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.fleet.state import pid_alive

STOP_WAIT_S = 10.0
_ERROR_LINE = re.compile(r"^(error: .*|stopped before the end.*|upload (?:incomplete|stopped).*)$", re.MULTILINE)


@dataclass(slots=True)
class Start:
    """One client process: when it ran, how it ended, and what it recorded."""

    index: int
    at_s: float  # since the first start
    kill_mode: str  # startup/resumed/seal/run: when it is killed; term: SIGTERM; end: once all is recorded; none
    records_before: int
    lived_s: float = 0.0
    ended: str = ""  # "SIGKILL", "exit 0", "exit 2", ...
    records_after: int = 0
    message: str | None = None  # what the client said when it stopped by itself
    traceback: bool = False
    faults: list[str] = field(default_factory=list)  # fault events active while it ran
    log: str = ""

    @property
    def progress(self) -> int:
        return self.records_after - self.records_before

    @property
    def killed(self) -> bool:
        return self.ended.startswith("SIG")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["progress"] = self.progress
        return out


class Client:
    """Runs the job's client processes one at a time, each with its own log file."""

    def __init__(self, job: Path, log_dir: Path, env: dict[str, str]) -> None:
        self.job = job
        self.log_dir = log_dir
        self.env = env
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen[bytes] | None = None
        self.current: Start | None = None
        self.starts: list[Start] = []
        self._began = 0.0

    def start(self, kill_mode: str, records: int, extra: tuple[str, ...] = ()) -> Start:
        """Start one client process."""
        index = len(self.starts)
        log_path = self.log_dir / f"client-{index:03d}.log"
        cmd = [sys.executable, "-m", "tokenmill", "run", str(self.job), "--no-live", *extra]
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env)
        self._began = time.monotonic()
        self.current = Start(index, round(self._began - self.t0, 2), kill_mode, records, log=str(log_path))
        self.starts.append(self.current)
        return self.current

    @property
    def alive_s(self) -> float:
        return time.monotonic() - self._began

    def poll(self) -> int | None:
        """The exit code once the process ended by itself, else None."""
        return None if self.proc is None else self.proc.poll()

    def send(self, sig: signal.Signals) -> None:
        """Signal the running process without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the running process and wait for it to go."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_WAIT_S)

    def finish(self, records: int, faults: list[str]) -> Start:
        """Record how the current process ended (call once it has ended)."""
        assert self.proc is not None and self.current is not None
        code = self.proc.wait(STOP_WAIT_S)
        start = self.current
        start.lived_s = round(self.alive_s, 2)
        start.ended = f"SIG{signal.Signals(-code).name[3:]}" if code < 0 else f"exit {code}"
        start.records_after = records
        start.faults = sorted(set(faults))
        text = Path(start.log).read_text(errors="replace")
        start.traceback = "Traceback (most recent call last)" in text
        if not start.killed:
            said = _ERROR_LINE.findall(text)
            start.message = said[-1][:300] if said else None
        self.proc, self.current = None, None
        return start

    def stop(self) -> None:
        """Kill a process still running (end of the chaos run, or a failure of the harness)."""
        self.kill(signal.SIGKILL)

    def alive_pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and pid_alive(self.proc.pid) else []


def client_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of every child: ours, plus ``extra``, with no HTTP proxy."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(extra)
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env
