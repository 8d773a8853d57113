"""The fleet's state directory: what other processes (``fleet status/down/apply``, a run) read and write.

STATE_DIR/endpoints.txt         the servers and their marks (see :mod:`tokenmill.run.endpoints`)
STATE_DIR/state.json            the supervisor's pid, the profile, every server's status, the last re-flag
STATE_DIR/apply-request.json    a re-flag asked for by ``fleet apply`` (the supervisor picks it up)
STATE_DIR/server-N.log          server N's output
STATE_DIR/supervisor.log        the supervisor's own log when it runs detached
STATE_DIR/.lock                 held by the one supervisor using this directory
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from tokenmill.config import FleetProfile
from tokenmill.errors import ServerError
from tokenmill.fsio import FileLock, LockHeld, atomic_write

ENDPOINTS = "endpoints.txt"
STATE = "state.json"
APPLY_REQUEST = "apply-request.json"
SUPERVISOR_LOG = "supervisor.log"
LOCK = ".lock"


def server_log(state_dir: Path, index: int) -> Path:
    """Where server ``index`` logs."""
    return state_dir / f"server-{index}.log"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically and durably with ``data`` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, orjson.dumps(data, option=orjson.OPT_INDENT_2), durable=True)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_state(state_dir: Path) -> dict[str, Any]:
    """``state.json``; ServerError saying what to do when there is none."""
    data = read_json(state_dir / STATE)
    if data is None:
        raise ServerError(
            f"no fleet state in {state_dir} (no {STATE}): start one with `tokenmill fleet up PROFILE.yaml`, "
            "or pass the --state-dir the fleet uses"
        )
    return data


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def request_apply(
    state_dir: Path,
    profile: FleetProfile,
    servers: list[int] | None = None,
    batch: int = 1,
    drain_timeout_s: float | None = None,
) -> str:
    """Ask the supervisor using ``state_dir`` to re-flag its servers (or only ``servers``, ``batch`` at a time, with
    another drain timeout) with ``profile``; returns the request id."""
    state = read_state(state_dir)
    if not pid_alive(state.get("supervisor_pid")) or state.get("status") in ("stopped", "failed"):
        raise ServerError(
            f"the fleet of {state_dir} is not running (status {state.get('status')!r}); "
            "start it with `tokenmill fleet up`"
        )
    request_id = uuid.uuid4().hex[:12]
    write_json(
        state_dir / APPLY_REQUEST,
        {
            "id": request_id,
            "profile": profile.model_dump(mode="json"),
            "servers": servers,
            "batch": batch,
            "drain_timeout_s": drain_timeout_s,
            "requested_at": time.time(),
        },
    )
    return request_id


class StateLock:
    """An exclusive ``flock`` on ``STATE_DIR/.lock``: one supervisor per state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK
        self._lock = FileLock(self.path)

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except LockHeld as held:
            raise ServerError(
                f"a fleet already runs from {self.path.parent} (supervisor pid {held.holder or '?'}): stop it with "
                "`tokenmill fleet down`, or give this fleet another state_dir"
            ) from None

    def release(self) -> None:
        self._lock.release()
