"""The simulated fleet under test: started with ``tokenmill fleet up --detach``, its servers killed at will, their
fault injection (``/sim/faults``) set and counted, stopped with ``tokenmill fleet down``.

The fleet's supervisor restarts a killed server on the same port; each new server process starts without
faults and with zeroed counters, so :meth:`Fleet.sync` (called often) re-applies the fault spec in force to
a new process and keeps the counts of the old ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from tokenmill.fleet.state import pid_alive, read_json

SIM_FAULTS = ("error", "rate_limit", "drop", "malformed", "stall")
RATE_FIELD = {
    "error": "error_rate",
    "rate_limit": "rate_limit_rate",
    "drop": "drop_rate",
    "malformed": "malformed_rate",
    "stall": "stall_rate",
}
HTTP_TIMEOUT_S = 2.0
CLI_TIMEOUT_S = 90.0

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json(url: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """GET (or POST ``body`` to) ``url`` straight to the server; the JSON answer, or None if unreachable."""
    data = orjson.dumps(body) if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=HTTP_TIMEOUT_S) as resp:
            out = orjson.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


@dataclass(slots=True)
class _Seen:
    """One server as last synced: its process, and the fault counts of its earlier processes."""

    pid: int | None = None
    spec_applied: bool = False
    current: dict[str, int] = field(default_factory=dict)
    earlier: dict[str, int] = field(default_factory=dict)


class Fleet:
    """A detached ``engine: sim`` fleet in ``state_dir``."""

    def __init__(self, workdir: Path, servers: int, sim_flags: dict[str, Any], env: dict[str, str]) -> None:
        self.state_dir = workdir / "fleet"
        self.profile = workdir / "fleet.yaml"
        self.servers = servers
        self.sim_flags = sim_flags
        self.env = env
        self.started = False
        self.urls: list[str] = []
        self.spec: dict[str, Any] = {}  # the FaultSpec fields in force on every server
        self._seen: dict[int, _Seen] = {}
        self.last_state: dict[str, Any] = {}

    def up(self) -> None:
        """Write the profile and start the fleet detached; returns once every server is healthy."""
        profile = {
            "engine": "sim",
            "model": "tokenmill-sim",
            "gpus": self.servers,
            "base_port": 0,
            "state_dir": str(self.state_dir),
            "flags": self.sim_flags,
            "restart_backoff_s": 0.2,
            "restart_backoff_max_s": 1.0,
            "max_restarts": 1000,
            "restart_reset_s": 5.0,
            "start_timeout_s": 30.0,
            "stop_timeout_s": 5.0,
            # a frozen server is found by its health probe (stalls are injected on purpose: no stall rule)
            "watchdog": {"interval_s": 0.5, "probe_timeout_s": 2.0, "probe_failures": 2, "stall_s": 0},
        }
        self.profile.write_text(yaml.safe_dump(profile))
        self.started = True
        res = self._cli("up", str(self.profile), "--detach")
        if res.returncode != 0:
            raise RuntimeError(f"tokenmill fleet up failed:\n{res.stdout}{res.stderr}")
        self.urls = [s["url"] for s in self.state().get("servers", [])]
        self.sync()

    def down(self) -> str:
        """Stop the fleet (servers, then supervisor); returns what ``fleet down`` said."""
        if not self.started:
            return "not started"
        res = self._cli("down", "--state-dir", str(self.state_dir))
        return (res.stdout + res.stderr).strip()

    def status(self) -> tuple[bool, str]:
        """``tokenmill fleet status``: whether it says every server is up, and its first line."""
        res = self._cli("status", "--state-dir", str(self.state_dir))
        lines = (res.stdout or res.stderr).strip().splitlines()
        return res.returncode == 0, lines[0] if lines else ""

    def state(self) -> dict[str, Any]:
        """``state.json`` as last written by the supervisor."""
        data = read_json(self.state_dir / "state.json")
        if data is not None:
            self.last_state = data
        return self.last_state

    def server(self, index: int) -> dict[str, Any]:
        servers: list[dict[str, Any]] = self.state().get("servers", [])
        return servers[index]

    def kill(self, index: int, sig: signal.Signals) -> int | None:
        """Send ``sig`` to server ``index``'s process; returns the pid signalled (None if it has none)."""
        self.sync()
        pid = self.server(index).get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            return None
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return None
        return pid

    def restarted(self, index: int, old_pid: int) -> bool:
        """Whether server ``index`` is up again in a new process."""
        s = self.server(index)
        return s.get("state") == "up" and s.get("pid") not in (None, old_pid)

    def set_faults(self, spec: dict[str, Any]) -> None:
        """Use this FaultSpec (rates, stall_s, seed) on every server from now on, restarted ones included."""
        self.spec = dict(spec)
        for seen in self._seen.values():
            seen.spec_applied = False
        self.sync()

    def sync(self) -> None:
        """Follow restarts: keep the old processes' counts, re-apply the spec to new ones, read counts."""
        for s in self.state().get("servers", []):
            seen = self._seen.setdefault(int(s["index"]), _Seen())
            pid = s.get("pid")
            if pid != seen.pid:
                for kind, n in seen.current.items():
                    seen.earlier[kind] = seen.earlier.get(kind, 0) + n
                seen.current, seen.pid, seen.spec_applied = {}, pid, False
            if s.get("state") != "up":
                continue
            url = str(s["url"])
            if not seen.spec_applied:
                seen.spec_applied = http_json(url + "/sim/faults", self._full_spec()) is not None
            answer = http_json(url + "/sim/faults")
            if answer is not None and isinstance(answer.get("counts"), dict):
                counts = {k: int(v) for k, v in answer["counts"].items()}
                if any(counts.get(k, 0) < n for k, n in seen.current.items()):
                    # a process's counts only grow: a new process answered before state.json named it
                    for kind, n in seen.current.items():
                        seen.earlier[kind] = seen.earlier.get(kind, 0) + n
                    seen.spec_applied = False
                seen.current = counts

    def counts(self) -> dict[str, int]:
        """Faults injected by every server process so far (as of the last :meth:`sync`)."""
        total = dict.fromkeys(SIM_FAULTS, 0)
        for seen in self._seen.values():
            for part in (seen.earlier, seen.current):
                for kind, n in part.items():
                    total[kind] = total.get(kind, 0) + n
        return total

    def pids(self) -> list[int]:
        """The supervisor's and every server's pid, as last known."""
        state = self.state()
        pids = [state.get("supervisor_pid")] + [s.get("pid") for s in state.get("servers", [])]
        return [p for p in pids if isinstance(p, int)]

    def _full_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {field: 0.0 for field in RATE_FIELD.values()}
        spec.update(self.spec)
        return spec

    def _cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tokenmill", "fleet", *args],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env=self.env,
        )


def wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    """Poll ``condition()`` until it is true or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
