"""Blocking health and load probes for the launcher (it runs in threads, beside any event loop).

Requests go straight to the server, never through an HTTP proxy from the environment.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from tokenmill.fleet.process import ServerProcess

PROBE_TIMEOUT_S = 2.0
POLL_S = 0.2

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[int, bytes] | None:
    """``(status, body)`` of a GET, or None when the server cannot be reached."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (urllib.error.URLError, OSError, ValueError):
        return None


def healthy(url: str, path: str) -> bool:
    """True when ``url + path`` answers 200."""
    answer = get(url + path)
    return answer is not None and answer[0] == 200


def wait_healthy(
    proc: ServerProcess, url: str, path: str, timeout_s: float, cancel: threading.Event | None = None
) -> str | None:
    """Poll until the server is healthy: None then, otherwise why it is not (exited, timed out, cancelled)."""
    deadline = time.monotonic() + timeout_s
    while not healthy(url, path):
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if time.monotonic() > deadline:
            return f"not healthy at {url}{path} after {timeout_s:.0f} s"
        code = proc.wait(POLL_S)  # the pause between probes; returns at once if the server dies
        if code is not None:
            return f"exited with code {code} before it was healthy"
    return None


def load(url: str) -> float | None:
    """Requests running plus queued on the server, from its ``/metrics``; None when that is unavailable."""
    from tokenmill.monitor.scrape import parse_metrics

    answer = get(url + "/metrics")
    if answer is None or answer[0] != 200:
        return None
    try:
        snap = parse_metrics(answer[1].decode("utf-8", "replace"), time.monotonic())
    except Exception:  # not Prometheus text (an engine without metrics answering every path)
        return None
    if snap.running is None and snap.queued is None:
        return None
    return (snap.running or 0.0) + (snap.queued or 0.0)
