"""Keeping one server alive: start, wait for health, restart after a crash with backoff, re-flag on request.

A :class:`ServerKeeper` owns one server process from a thread of its own (the process's parent-death
signal is tied to that thread, which lives as long as the keeper). Its rules:

- a start that never becomes healthy (bad flag, out of memory, timeout) is a *start failure*: reported to
  whoever asked for the start, with the log tail, and not retried;
- a server that was healthy and then exits is a *crash*: restarted on the same port after
  ``restart_backoff_s`` doubling up to ``restart_backoff_max_s``, at most ``max_restarts`` times in a row
  (a server that stays up ``restart_reset_s`` starts the count again);
- a server that was healthy and then hangs (:mod:`tokenmill.fleet.watchdog`) is killed (SIGKILL to its process
  group: a hung or frozen process does not act on SIGTERM) and restarted like a crashed one;
- :meth:`restart` stops the server and starts it with another profile's command (a re-flag).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

from tokenmill.config import FleetSpec, backoff
from tokenmill.errors import ServerError
from tokenmill.fleet import health
from tokenmill.fleet.process import ServerProcess, tail
from tokenmill.fleet.state import ServerStatus
from tokenmill.fleet.template import Slot, redact, render
from tokenmill.fleet.watchdog import Watchdog

log = logging.getLogger(__name__)

PORT_RETRIES = 3  # auto-picked ports: another process may take the port between the pick and the bind


def free_port(host: str) -> int:
    """A port free on ``host`` right now (the engine binds it a moment later; see PORT_RETRIES)."""
    bind_host = "" if host in ("0.0.0.0", "::") else host
    with socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET) as sock:
        sock.bind((bind_host, 0))
        port: int = sock.getsockname()[1]
        return port


def url_host(host: str, node_ip: str = "127.0.0.1") -> str:
    """The host clients use for a server bound to ``host`` (a wildcard bind is reached at ``node_ip``)."""
    return node_ip if host in ("0.0.0.0", "::", "") else host


class ServerKeeper:
    """Runs server ``index`` of a fleet and keeps it running (see the module docstring)."""

    def __init__(
        self,
        profile: FleetSpec,
        index: int,
        gpus: tuple[int, ...],
        log_path: Path,
        *,
        node_ip: str = "127.0.0.1",
        set_visible_devices: bool = True,
        clock: Any = time.monotonic,
    ) -> None:
        self.index = index
        self.gpus = gpus
        self.log_path = log_path
        self.set_visible_devices = set_visible_devices
        self._clock = clock
        self._auto_port = profile.base_port == 0
        self._host = profile.host
        self.port = free_port(profile.host) if self._auto_port else profile.base_port + index
        self._url_host = url_host(profile.host, node_ip)
        self._cond = threading.Condition()
        self._interrupt = threading.Event()
        self._desired = profile
        self._wanted_gen = 0
        self._outcomes: dict[int, str | None] = {}
        self._stopping = False
        self._up_gen = -1  # the last generation that was healthy
        self._status = ServerStatus(index=index, url=self.url, state="starting", gpus=list(gpus))
        self._status.log_path = str(log_path)
        self._thread = threading.Thread(target=self._main, name=f"tokenmill-server-{index}", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self._url_host}]" if ":" in self._url_host else self._url_host
        return f"http://{host}:{self.port}"

    # ---- public -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the keeper thread (which starts the server); see :meth:`wait_started`."""
        self._thread.start()

    def wait_started(self, timeout: float | None = None) -> str | None:
        """None once the first start is healthy; otherwise why it failed (with the log tail)."""
        return self._wait_outcome(0, timeout)

    def status(self) -> ServerStatus:
        """A copy of the current status."""
        with self._cond:
            return ServerStatus.from_dict(self._status.to_dict())

    def restart(self, profile: FleetSpec, timeout: float | None = None) -> str | None:
        """Stop the server and start it with ``profile``'s command; None once healthy, else why not."""
        with self._cond:
            self._wanted_gen += 1
            self._desired = profile
            gen = self._wanted_gen
        self._interrupt.set()
        return self._wait_outcome(gen, timeout)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after the grace) and the keeper thread."""
        with self._cond:
            self._stopping = True
        self._interrupt.set()
        if self._thread.is_alive():
            self._thread.join()

    # ---- the thread ---------------------------------------------------------------------------------------

    def _wait_outcome(self, gen: int, timeout: float | None) -> str | None:
        with self._cond:
            ok = self._cond.wait_for(lambda: gen in self._outcomes or self._stopping, timeout)
            if not ok:
                return f"server {self.index} ({self.url}) gave no answer within {timeout:.0f} s"
            if gen not in self._outcomes:
                return f"server {self.index} ({self.url}) was stopped"
            return self._outcomes[gen]

    def _set(self, **changes: Any) -> None:
        with self._cond:
            for key, value in changes.items():
                setattr(self._status, key, value)
            self._cond.notify_all()

    def _report(self, gen: int, outcome: str | None) -> None:
        with self._cond:
            self._outcomes[gen] = outcome
            self._cond.notify_all()

    def _main(self) -> None:
        crashes = 0
        port_tries = 0
        try:
            while True:
                self._interrupt.clear()
                with self._cond:
                    if self._stopping:
                        return
                    gen, profile = self._wanted_gen, self._desired
                problem, up_for = self._run_once(profile, gen)
                if problem is None:  # interrupted: stop, or a new generation
                    continue
                if gen == self._up_gen:  # a crash of a working configuration, or a failed restart after one
                    if up_for is not None and up_for >= profile.restart_reset_s:
                        crashes = 0
                    crashes += 1
                    if not self._after_crash(profile, problem, crashes):
                        self._interrupt.wait()
                    continue
                crashes = 0
                message = self._failure(problem)
                if self._auto_port and port_tries < PORT_RETRIES and "address already in use" in message.lower():
                    port_tries += 1
                    self.port = free_port(self._host)
                    continue
                self._set(state="failed", pid=None, error=message)
                self._report(gen, message)
                self._interrupt.wait()  # until stopped or given another profile
        finally:
            self._set(state="stopped", pid=None)

    def _run_once(self, profile: FleetSpec, gen: int) -> tuple[str | None, float | None]:
        """Start, wait healthy, wait for exit: (None, None) when interrupted, else (problem, seconds it was up)."""
        argv = render(profile, Slot(self.index, self.gpus, profile.host, self.port))
        env: dict[str, str | None] = dict(profile.env)
        if self.set_visible_devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        proc = ServerProcess(argv, env, self.log_path)
        self._set(state="starting", pid=None, command=redact(argv), flags=dict(profile.flags), url=self.url)
        try:
            proc.start(note=f" server {self.index} (profile generation {gen})")
        except ServerError as exc:
            return str(exc), None
        self._set(pid=proc.pid)
        problem = health.wait_healthy(proc, self.url, profile.health_path, profile.start_timeout_s, self._interrupt)
        if problem == "cancelled":
            self._halt(proc, profile)
            return None, None
        if problem is not None:
            proc.stop(profile.stop_timeout_s)
            return problem, None
        up_at = self._clock()
        self._up_gen = gen
        self._set(state="up", generation=gen, error=None)
        self._report(gen, None)
        log.info("server %d is up at %s (pid %s)", self.index, self.url, proc.pid)
        watch = profile.watchdog
        dog = Watchdog(watch, self.url, profile.health_path, clock=self._clock) if watch.enabled else None
        while True:
            code = proc.poll()
            if code is not None:
                return f"exited with code {code}", self._clock() - up_at
            if self._interrupt.wait(health.POLL_S):
                self._halt(proc, profile)
                return None, None
            hung = dog.check() if dog is not None else None
            if hung is not None:
                log.error("server %d (%s, pid %s) is hung: %s; killing it", self.index, self.url, proc.pid, hung)
                self._set(state="down")
                proc.kill()
                return f"was hung ({hung}) and was killed", self._clock() - up_at

    def _halt(self, proc: ServerProcess, profile: FleetSpec) -> None:
        self._set(state="stopping")
        proc.stop(profile.stop_timeout_s)
        self._set(pid=None)

    def _failure(self, problem: str) -> str:
        return (
            f"server {self.index} ({self.url}) {problem}; log {self.log_path}, last lines:\n"
            f"{tail(self.log_path, self._desired.log_tail_lines)}"
        )

    def _after_crash(self, profile: FleetSpec, problem: str, crashes: int) -> bool:
        """Record a crash and wait the backoff; False when the server is given up."""
        message = self._failure(problem)
        if crashes > profile.max_restarts:
            log.error("server %d gave up after %d restarts in a row: %s", self.index, crashes - 1, message)
            self._set(state="failed", pid=None, error=f"gave up after {crashes - 1} restarts in a row: {message}")
            return False
        delay = backoff(crashes, profile.restart_backoff_s, profile.restart_backoff_max_s)
        log.warning("server %d %s; restarting in %.1f s (restart %d of %d)", self.index, problem, delay, crashes,
                    profile.max_restarts)  # fmt: skip
        with self._cond:
            self._status.restarts += 1
        self._set(state="down", pid=None, error=message)
        self._interrupt.wait(delay)
        return True
