"""The client's servers file: the fleet's endpoints file with every URL replaced by its fault proxy.

The run follows this copy exactly as it would follow the fleet's own file (``servers_file``): a server the
fleet marks ``# down`` while it restarts is marked down here within ``poll_s``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tokenmill.fleet import endpoints
from tokenmill.fleet.endpoints import Endpoint

POLL_S = 0.05


class EndpointsMirror:
    """Re-renders ``target`` from ``source`` whenever ``source`` changes, from a thread of its own."""

    def __init__(self, source: Path, target: Path, proxies: dict[str, str]) -> None:
        self.source = source
        self.target = target
        self.proxies = proxies
        self.changes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="chaos-endpoints-mirror", daemon=True)
        self._last: list[Endpoint] | None = None

    def start(self) -> None:
        """Write the first copy, then follow."""
        self._copy()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _main(self) -> None:
        while not self._stop.wait(POLL_S):
            self._copy()

    def _copy(self) -> None:
        found = endpoints.read(self.source)
        if found is None:
            return
        mapped = [Endpoint(self.proxies.get(ep.url, ep.url), ep.mark) for ep in found]
        if mapped != self._last:
            endpoints.write(self.target, mapped)
            self._last = mapped
            self.changes += 1
