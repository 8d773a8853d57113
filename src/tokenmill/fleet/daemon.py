"""The fleet's supervisor as a process of its own: started detached, stopped, its leftovers killed, a re-flag awaited.

``tokenmill fleet up --detach`` is :func:`start_detached` (a ``tokenmill fleet up`` in a new session, its output in
STATE_DIR/supervisor.log, returned once its state says ready), ``fleet down`` is :func:`stop` (SIGTERM the supervisor,
wait until it is gone, then SIGKILL the process groups of servers a dead supervisor left), ``fleet apply`` and the
autotuner wait for a re-flag with :func:`wait_apply`. Each works on the state directory alone, so code and tests call
them as the command line does; the clock and the pause between looks are parameters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import ServerError
from tokenmill.fleet.process import tail
from tokenmill.fleet.state import STATE, SUPERVISOR_LOG, FleetState, load_state, pid_alive, read_json

DETACH_WAIT_S = 5.0  # beyond the profile's start timeout, for the supervisor process itself
START_POLL_S = 0.2
STOP_POLL_S = 0.1
APPLY_POLL_S = 0.2
LOG_LINES = 40  # of the supervisor's log shown when it does not start

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class Detached:
    """A supervisor started by :func:`start_detached` and ready."""

    pid: int
    endpoints_file: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """What :func:`stop` did."""

    supervisor_pid: int | None  # the supervisor it stopped (None: none was running)
    leftovers: int  # server process groups it killed because their supervisor was gone


def supervisor_command(
    profile_file: str | Path, state_dir: Path, ray_address: str | None = None, log_level: str = "INFO"
) -> list[str]:
    """The command line of a foreground supervisor for ``profile_file`` in ``state_dir``."""
    cmd = [sys.executable, "-m", "tokenmill", "fleet", "up", str(profile_file), "--state-dir", str(state_dir)]
    return cmd + ["--log-level", log_level] + (["--ray-address", ray_address] if ray_address else [])


def start_detached(
    profile_file: str | Path,
    state_dir: Path,
    start_timeout_s: float,
    *,
    ray_address: str | None = None,
    log_level: str = "INFO",
    clock: Clock = time.monotonic,
) -> Detached:
    """Start a supervisor in a session of its own and return once its state says it is ready; ServerError (with
    the end of its log) when it exits first or is not ready within ``start_timeout_s`` (then it is stopped)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE).unlink(missing_ok=True)
    log_path = state_dir / SUPERVISOR_LOG
    cmd = supervisor_command(profile_file, state_dir, ray_address, log_level)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = clock() + start_timeout_s + DETACH_WAIT_S
    while clock() < deadline:
        state = read_json(state_dir / STATE) or {}
        if state.get("supervisor_pid") == proc.pid and state.get("status") == "ready":
            return Detached(proc.pid, str(state["endpoints_file"]))
        try:
            proc.wait(START_POLL_S)
        except subprocess.TimeoutExpired:
            continue
        raise ServerError(f"the fleet did not start; {log_path}, last lines:\n{tail(log_path, LOG_LINES)}")
    os.killpg(proc.pid, signal.SIGTERM)
    raise ServerError(f"the fleet was not ready in time; {log_path}, last lines:\n{tail(log_path, LOG_LINES)}")


def stop(state_dir: Path, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep) -> Stopped:
    """Stop the fleet of ``state_dir``: SIGTERM its supervisor (which stops every server) and wait until it is
    gone, then kill what a supervisor that died outright left. ServerError when it outlives ``timeout_s``."""
    state = load_state(state_dir)
    pid = state.supervisor_pid
    stopped = None
    if pid is not None and pid_alive(pid) and state.status not in ("stopped", "failed"):
        os.kill(pid, signal.SIGTERM)
        deadline = clock() + timeout_s
        while not gone(pid) and clock() < deadline:
            sleep(STOP_POLL_S)
        if not gone(pid):
            raise ServerError(f"the fleet supervisor (pid {pid}) did not stop within {timeout_s:.0f} s")
        stopped = pid
    return Stopped(stopped, kill_leftovers(state))


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended; a supervisor this process started (:func:`start_detached` called from
    code) is reaped here, or it would linger as a zombie that still looks alive."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    return not pid_alive(pid)


def kill_leftovers(state: FleetState) -> int:
    """SIGKILL the process groups of this machine's servers that are still alive (their supervisor is gone:
    it was killed outright); the count killed."""
    killed = 0
    for server in state.servers:
        pid = server.pid
        if server.node is None and pid is not None and pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                continue
    return killed


def wait_apply(
    state_dir: Path,
    request_id: str,
    say: Callable[[str], None],
    *,
    poll_s: float = APPLY_POLL_S,
    sleep: Sleep = time.sleep,
) -> Sequence[str]:
    """Wait until the supervisor of ``state_dir`` has carried out re-flag ``request_id``, passing each new line of
    its progress to ``say``; its progress lines once done. ServerError when the re-flag fails (the last line says
    why) or the supervisor stops before it is done."""
    shown = 0
    while True:
        state = load_state(state_dir)
        last = state.apply
        if last is not None and last.id == request_id:
            lines = list(last.progress)
            for line in lines[shown:]:
                say(line)
            shown = len(lines)
            if last.state == "done":
                return lines
            if last.state == "failed":
                raise ServerError(f"re-flag {request_id} failed: {lines[-1] if lines else '?'}")
        if not pid_alive(state.supervisor_pid):
            raise ServerError(f"the fleet supervisor stopped during re-flag {request_id}")
        sleep(poll_s)
