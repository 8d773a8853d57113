"""The fleet's state directory: what other processes (``fleet status/down/apply``, a run) read and write.

STATE_DIR/endpoints.txt         the servers and their marks (see :mod:`tokenmill.fleet.endpoints`)
STATE_DIR/state.json            the supervisor's pid, the profile, every server's status, the last re-flag
                                (:class:`FleetState`: :func:`write_state` writes it, :func:`load_state` reads it)
STATE_DIR/apply-request.json    a re-flag asked for by ``fleet apply`` (:class:`ApplyRequest`; the supervisor
                                picks it up)
STATE_DIR/server-N.log          server N's output
STATE_DIR/supervisor.log        the supervisor's own log when it runs detached
STATE_DIR/.lock                 held by the one supervisor using this directory
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tokenmill.config import FleetSpec
from tokenmill.errors import ServerError
from tokenmill.fsio import FileLock, LockHeld, atomic_write

ENDPOINTS = "endpoints.txt"
STATE = "state.json"
APPLY_REQUEST = "apply-request.json"
SUPERVISOR_LOG = "supervisor.log"
LOCK = ".lock"


State = Literal["starting", "up", "down", "stopping", "stopped", "failed"]
ApplyState = Literal["running", "done", "failed"]
_ENDED = ("stopped", "failed")  # a fleet status after which no supervisor runs


@dataclass(slots=True)
class ServerStatus:
    """One server as the fleet reports it (``state.json``, ``fleet status``)."""

    index: int
    url: str
    state: State
    gpus: list[int]
    pid: int | None = None
    restarts: int = 0
    generation: int = 0  # which profile it runs: 0 the first, +1 per re-flag
    command: str = ""  # redacted
    flags: dict[str, Any] = field(default_factory=dict)
    log_path: str = ""
    error: str | None = None
    node: str | None = None  # Ray node id, when placed by Ray

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerStatus:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True, slots=True)
class ApplyProgress:
    """The last re-flag as ``state.json`` reports it: its request id, where it is, and its lines so far."""

    id: str
    state: ApplyState
    progress: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "progress": list(self.progress)}

    @classmethod
    def from_json(cls, data: Any) -> ApplyProgress | None:
        if not isinstance(data, dict) or data.get("state") not in ("running", "done", "failed"):
            return None
        lines = data.get("progress")
        return cls(str(data.get("id")), data["state"], tuple(map(str, lines)) if isinstance(lines, list) else ())


@dataclass(frozen=True, slots=True)
class FleetState:
    """``state.json``: what the supervisor publishes for ``fleet status/down/apply``, the tuner and runs."""

    supervisor_pid: int | None
    kind: str
    status: str  # starting / ready / stopping / stopped / failed
    started_at: float
    endpoints_file: str
    profile: dict[str, Any]  # the fleet's profile, as JSON
    servers: tuple[ServerStatus, ...]
    reflagged: dict[str, dict[str, Any]]  # server index -> the flags it runs, when not the profile's
    apply: ApplyProgress | None = None

    @property
    def running(self) -> bool:
        """Whether its supervisor still runs (its process is there and the fleet has not ended)."""
        return pid_alive(self.supervisor_pid) and self.status not in _ENDED

    def to_json(self) -> dict[str, Any]:
        return {
            "supervisor_pid": self.supervisor_pid,
            "kind": self.kind,
            "status": self.status,
            "started_at": self.started_at,
            "endpoints_file": self.endpoints_file,
            "profile": self.profile,
            "servers": [s.to_dict() for s in self.servers],
            "reflagged": self.reflagged,
            "apply": self.apply.to_json() if self.apply is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FleetState:
        pid, profile, reflagged = data.get("supervisor_pid"), data.get("profile"), data.get("reflagged")
        servers = data.get("servers")
        return cls(
            supervisor_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            kind=str(data.get("kind") or ""),
            status=str(data.get("status") or ""),
            started_at=float(data.get("started_at") or 0.0),
            endpoints_file=str(data.get("endpoints_file") or ""),
            profile=profile if isinstance(profile, dict) else {},
            servers=tuple(_servers(servers if isinstance(servers, list) else [])),
            reflagged=reflagged if isinstance(reflagged, dict) else {},
            apply=ApplyProgress.from_json(data.get("apply")),
        )


def _servers(items: list[Any]) -> list[ServerStatus]:
    found = []
    for item in items:
        if isinstance(item, dict):
            try:
                found.append(ServerStatus.from_dict(item))
            except TypeError:  # a server entry without its required fields: not shown
                continue
    return found


@dataclass(frozen=True, slots=True)
class ApplyRequest:
    """``apply-request.json``: a re-flag asked of the supervisor (all servers, or only ``servers``)."""

    id: str
    profile: dict[str, Any]  # the new profile, as JSON
    servers: list[int] | None = None
    batch: int = 1  # servers re-flagged at a time
    drain_timeout_s: float | None = None  # None: the profile's
    requested_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApplyRequest:
        servers, batch, drain = data.get("servers"), data.get("batch"), data.get("drain_timeout_s")
        profile = data.get("profile")
        return cls(
            id=str(data.get("id")),
            profile=profile if isinstance(profile, dict) else {},
            servers=[i for i in servers if isinstance(i, int)] if isinstance(servers, list) else None,
            batch=batch if isinstance(batch, int) and batch > 0 else 1,
            drain_timeout_s=float(drain) if isinstance(drain, int | float) else None,
            requested_at=float(data.get("requested_at") or 0.0),
        )


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


def write_state(state_dir: Path, state: FleetState) -> None:
    """Replace ``state.json`` (atomically: a reader sees the old state or the new one)."""
    write_json(state_dir / STATE, state.to_json())


def load_state(state_dir: Path) -> FleetState:
    """``state.json``; ServerError saying what to do when there is none."""
    data = read_json(state_dir / STATE)
    if data is None:
        raise ServerError(
            f"no fleet state in {state_dir} (no {STATE}): start one with `tokenmill fleet up PROFILE.yaml`, "
            "or pass the --state-dir the fleet uses"
        )
    return FleetState.from_json(data)


def read_request(state_dir: Path) -> ApplyRequest | None:
    """The re-flag ``fleet apply`` asked for, or None when there is none."""
    data = read_json(state_dir / APPLY_REQUEST)
    return ApplyRequest.from_json(data) if data is not None else None


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
    profile: FleetSpec,
    servers: list[int] | None = None,
    batch: int = 1,
    drain_timeout_s: float | None = None,
) -> str:
    """Ask the supervisor using ``state_dir`` to re-flag its servers (or only ``servers``, ``batch`` at a time, with
    another drain timeout) with ``profile``; returns the request id."""
    state = load_state(state_dir)
    if not state.running:
        raise ServerError(
            f"the fleet of {state_dir} is not running (status {state.status!r}); start it with `tokenmill fleet up`"
        )
    request = ApplyRequest(
        uuid.uuid4().hex[:12], profile.model_dump(mode="json"), servers, batch, drain_timeout_s, time.time()
    )
    write_json(state_dir / APPLY_REQUEST, request.to_json())
    return request.id


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
