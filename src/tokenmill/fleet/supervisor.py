"""The fleet: start every server, publish the endpoints, watch, re-flag one server at a time, stop.

:class:`Fleet` works on server handles, whatever runs them (threads of this process, or Ray actors), and
keeps the state directory current from one watcher thread: the endpoints file (what a run follows) and
``state.json`` (what ``fleet status`` shows). A re-flag (:meth:`Fleet.apply`, or an ``apply-request.json``
written by ``tokenmill fleet apply``) restarts the servers one at a time:

1. mark the server ``draining`` in the endpoints file, so the runs following it send it nothing new;
2. wait for its requests to finish: at least ``drain_notice_s`` (the runs' time to notice), then until its
   ``/metrics`` shows nothing running or queued, at most ``drain_timeout_s`` (what is still in flight then
   is retried elsewhere by the runs, without counting against the prompts);
3. restart it with the new flags and wait until it is healthy;
4. mark it ``up`` again, and go on with the next server.

A server that does not come up with the new flags is started again with the old ones and the re-flag stops
there, with the server's log tail in the error.

A re-flag may name some servers only (``servers=``: an autotune canary, or a roll-back): each server remembers
the profile it runs, and the fleet's own profile becomes the new one once every server runs it. ``batch``
servers are drained and restarted at once (1: one at a time).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tokenmill.config import FleetSpec
from tokenmill.errors import ConfigError, ServerError
from tokenmill.fleet import endpoints, health
from tokenmill.fleet.endpoints import Endpoint
from tokenmill.fleet.state import (
    APPLY_REQUEST,
    ENDPOINTS,
    ApplyProgress,
    ApplyState,
    FleetState,
    ServerStatus,
    StateLock,
    read_request,
    write_state,
)

log = logging.getLogger(__name__)

WATCH_S = 0.25
# Profile fields a re-flag may not change: they decide where servers run, not how.
LAYOUT_FIELDS = ("gpus", "tp_size", "host", "base_port", "state_dir")
# Profile fields that change what a server runs.
RUN_FIELDS = ("engine", "model", "flags", "extra_args", "command", "python", "env", "health_path")


class ServerHandle(Protocol):
    """One server of the fleet, wherever it runs."""

    def wait_started(self, timeout: float | None = None) -> str | None: ...

    def status(self) -> ServerStatus: ...

    def restart(self, profile: FleetSpec, timeout: float | None = None) -> str | None: ...

    def stop(self) -> None: ...


Launcher = Callable[[FleetSpec, Path], list[ServerHandle]]


def check_reflag(old: FleetSpec, new: FleetSpec) -> list[str]:
    """The run fields that differ; ConfigError when a layout field differs."""
    moved = [f for f in LAYOUT_FIELDS if getattr(old, f) != getattr(new, f)]
    if moved:
        raise ConfigError(
            f"a re-flag cannot change {', '.join(moved)}: those decide where the servers run. "
            "Stop the fleet (`tokenmill fleet down`) and start it with the new profile instead."
        )
    return [f for f in RUN_FIELDS if getattr(old, f) != getattr(new, f)]


class Fleet:
    """Servers of one profile, started by ``launcher``, with their state kept in ``state_dir``."""

    def __init__(self, profile: FleetSpec, launcher: Launcher, state_dir: Path | None = None, kind: str = "local"):
        self.profile = profile
        self.launcher = launcher
        self.kind = kind
        self.state_dir = Path(state_dir if state_dir is not None else profile.state_dir).absolute()
        self.endpoints_path = self.state_dir / ENDPOINTS
        self.handles: list[ServerHandle] = []
        self.status = "starting"
        self._lock = threading.RLock()
        self._state_lock = StateLock(self.state_dir)
        self._draining: set[int] = set()
        self._stopped = threading.Event()
        self._watcher: threading.Thread | None = None
        self._last_endpoints: str | None = None
        self._last_state: FleetState | None = None
        self._apply: ApplyProgress | None = None
        self._apply_thread: threading.Thread | None = None
        self._handled_request: str | None = None
        self._runs: dict[int, FleetSpec] = {}  # the profile each server runs, when not the fleet's
        self._started_at = time.time()

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def up(self) -> Fleet:
        """Start every server and wait until all are healthy; ServerError (with log tails) if any is not."""
        self._state_lock.acquire()
        try:
            _clear_stale(self.state_dir)
            self.handles = self.launcher(self.profile, self.state_dir)
            self._watcher = threading.Thread(target=self._watch, name="tokenmill-fleet-watch", daemon=True)
            self._watcher.start()
            problems = [p for p in (h.wait_started() for h in self.handles) if p is not None]
        except BaseException:
            self.down(status="failed")
            raise
        if problems:
            self.down(status="failed")
            raise ServerError(
                f"{len(problems)} of {len(self.handles)} servers did not start; every server was stopped.\n\n"
                + "\n\n".join(problems)
            )
        self.status = "ready"
        self.publish()
        log.info("fleet ready: %d servers, endpoints in %s", len(self.handles), self.endpoints_path)
        return self

    def down(self, status: str = "stopped") -> None:
        """Stop every server (in parallel) and the watcher; the endpoints file then lists none."""
        if self._stopped.is_set():
            return
        self.status = "stopping"
        self.publish()
        threads = [threading.Thread(target=h.stop, daemon=True) for h in self.handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._stopped.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        self.status = status
        self.publish(final=True)
        self._state_lock.release()

    def __enter__(self) -> Fleet:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the fleet is stopped (True) or ``timeout`` passes (False)."""
        return self._stopped.wait(timeout)

    # ---- views --------------------------------------------------------------------------------------------

    def statuses(self) -> list[ServerStatus]:
        return [h.status() for h in self.handles]

    def urls(self) -> list[str]:
        return [s.url for s in self.statuses()]

    def endpoints(self, statuses: list[ServerStatus] | None = None) -> list[Endpoint]:
        with self._lock:
            draining = set(self._draining)
        out = []
        for st in statuses if statuses is not None else self.statuses():
            mark: endpoints.Mark = "draining" if st.index in draining else "up" if st.state == "up" else "down"
            out.append(Endpoint(st.url, mark))
        return out

    # ---- re-flag ------------------------------------------------------------------------------------------

    def runs(self, index: int) -> FleetSpec:
        """The profile server ``index`` runs (the fleet's, unless a partial re-flag gave it another)."""
        with self._lock:
            return self._runs.get(index, self.profile)

    def apply(
        self,
        new: FleetSpec,
        progress: Callable[[str], None] | None = None,
        servers: Sequence[int] | None = None,
        batch: int = 1,
        drain_timeout_s: float | None = None,
    ) -> None:
        """Restart ``servers`` (default: all), ``batch`` at a time, with ``new``'s command (see the module
        docstring); the fleet's profile becomes ``new`` once every server runs it. ``drain_timeout_s`` replaces
        the profile's for this re-flag (a roll-back need not wait for a slow server's requests)."""
        say = progress or (lambda msg: log.info("%s", msg))
        check_reflag(self.profile, new)
        chosen = list(range(len(self.handles))) if servers is None else list(servers)
        todo = [i for i in chosen if check_reflag(self.runs(i), new)]
        if not todo:
            say("nothing to apply: the profile runs the same command")
            self._commit(new)
            return
        changed = sorted({f for i in todo for f in check_reflag(self.runs(i), new)}, key=RUN_FIELDS.index)
        say(f"re-flag: {', '.join(changed)} changed; restarting {len(todo)} server(s), {batch} at a time")
        for start in range(0, len(todo), max(1, batch)):
            group = todo[start : start + max(1, batch)]
            problems: dict[int, str | None] = {}

            def reflag(i: int, problems: dict[int, str | None] = problems) -> None:
                problems[i] = self._reflag_one(i, new, say, drain_timeout_s)

            threads = [threading.Thread(target=reflag, args=(i,), daemon=True) for i in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            failed = {i: p for i, p in problems.items() if p is not None}
            if failed:
                raise ServerError(
                    "re-flag stopped at server "
                    + ", ".join(map(str, sorted(failed)))
                    + ": "
                    + "\n".join(p for p in failed.values() if p)
                    + "\nservers before them run the new flags, the ones after them the old ones. "
                    "Fix the profile and apply it again."
                )
        self._commit(new)

    def _reflag_one(
        self, i: int, new: FleetSpec, say: Callable[[str], None], drain_timeout_s: float | None = None
    ) -> str | None:
        """Drain server ``i``, restart it with ``new``; None when it is up with it, else what went wrong (it then
        runs its old profile again)."""
        handle, old = self.handles[i], self.runs(i)
        url = handle.status().url
        waited, idle = self._drain(i, url, new, drain_timeout_s)
        say(f"server {i} ({url}): drained in {waited:.1f} s" + ("" if idle else " (requests still in flight)"))
        problem = handle.restart(new, timeout=new.start_timeout_s + 2 * new.stop_timeout_s + 30)
        if problem is not None:
            say(f"server {i} did not start with the new flags; starting it with the old ones")
            back = handle.restart(old, timeout=old.start_timeout_s + 2 * old.stop_timeout_s + 30)
            self._undrain(i)
            where = "it runs the old flags again" if back is None else f"the old flags failed too: {back}"
            return f"{problem}\n{where}"
        with self._lock:
            self._runs[i] = new
        self._undrain(i)
        say(f"server {i} ({handle.status().url}): up with the new flags")
        return None

    def _commit(self, new: FleetSpec) -> None:
        """Once every server runs ``new`` it is the fleet's profile."""
        with self._lock:
            if all(self._runs.get(i, self.profile) == new for i in range(len(self.handles))):
                self.profile = new
                self._runs.clear()
        self.publish()

    def _drain(self, index: int, url: str, profile: FleetSpec, timeout_s: float | None = None) -> tuple[float, bool]:
        """Mark a server draining and wait for it to go idle (bounded). Returns (seconds waited, idle)."""
        with self._lock:
            self._draining.add(index)
        self.publish()
        start = time.monotonic()
        notice_until = start + profile.drain_notice_s
        timeout = profile.drain_timeout_s if timeout_s is None else timeout_s
        deadline = start + max(timeout, profile.drain_notice_s)
        while True:
            now = time.monotonic()
            if now >= notice_until:
                load = health.load(url)
                if load is None:
                    log.warning("server %d has no usable /metrics: its requests in flight are retried elsewhere", index)
                    return now - start, False
                if load == 0:
                    return now - start, True
            if now >= deadline:
                return now - start, False
            if self._stopped.wait(health.POLL_S):
                raise ServerError("the fleet was stopped during a re-flag")

    def _undrain(self, index: int) -> None:
        with self._lock:
            self._draining.discard(index)
        self.publish()

    # ---- state directory ----------------------------------------------------------------------------------

    def publish(self, final: bool = False) -> None:
        """Rewrite the endpoints file and state.json if anything changed."""
        with self._lock:
            statuses = self.statuses()
            eps = [] if final else self.endpoints(statuses)
            text = endpoints.render(eps)
            if text != self._last_endpoints:
                endpoints.write(self.endpoints_path, eps)
                self._last_endpoints = text
            state = FleetState(
                supervisor_pid=os.getpid(),
                kind=self.kind,
                status=self.status,
                started_at=self._started_at,
                endpoints_file=str(self.endpoints_path),
                profile=self.profile.model_dump(mode="json"),
                servers=tuple(statuses),
                reflagged={str(i): p.flags for i, p in self._runs.items()},
                apply=self._apply,
            )
            if state != self._last_state:
                write_state(self.state_dir, state)
                self._last_state = state

    def _watch(self) -> None:
        while not self._stopped.wait(WATCH_S):
            try:
                self.publish()
                self._take_request()
            except Exception:  # the watcher must outlive a bad request or a full disk; say why
                log.exception("fleet watcher: publishing the state failed (retrying)")

    def _take_request(self) -> None:
        if self.status != "ready" or (self._apply_thread is not None and self._apply_thread.is_alive()):
            return
        request = read_request(self.state_dir)
        if request is None or request.id == self._handled_request:
            return
        self._handled_request = request.id
        (self.state_dir / APPLY_REQUEST).unlink(missing_ok=True)
        self._apply_thread = threading.Thread(
            target=self._apply_requested,
            args=(request.id, request.profile, request.servers, request.batch, request.drain_timeout_s),
            daemon=True,
        )
        self._apply_thread.start()

    def _apply_requested(
        self,
        request_id: str,
        data: Any,
        servers: list[int] | None = None,
        batch: int = 1,
        drain_timeout_s: float | None = None,
    ) -> None:
        progress: list[str] = []

        def say(msg: str) -> None:
            log.info("%s", msg)
            progress.append(msg)
            self._set_apply(request_id, "running", progress)

        self._set_apply(request_id, "running", progress)
        try:
            new = FleetSpec.model_validate(data)
            self.apply(new, say, servers=servers, batch=batch, drain_timeout_s=drain_timeout_s)
        except Exception as exc:  # reported to `fleet apply` through state.json
            log.error("re-flag %s failed: %s", request_id, exc)
            progress.append(f"error: {exc}")
            self._set_apply(request_id, "failed", progress)
        else:
            self._set_apply(request_id, "done", progress)

    def _set_apply(self, request_id: str, state: ApplyState, progress: list[str]) -> None:
        with self._lock:
            self._apply = ApplyProgress(request_id, state, tuple(progress))
        self.publish()


def _clear_stale(state_dir: Path) -> None:
    """Remove what a fleet that died left in its state directory: the endpoints file and an unread apply request."""
    for name in (ENDPOINTS, APPLY_REQUEST):
        (state_dir / name).unlink(missing_ok=True)
