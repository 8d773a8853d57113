"""The endpoints file: the fleet's servers, one base URL a line, and the run's control channel.

The fleet rewrites it (atomically) whenever a server changes state; a run whose ``servers_file`` names it
re-reads it every ``servers_file_poll_s`` and follows it::

    # tokenmill fleet endpoints: one base URL a line; a `# draining` or `# down` server gets no new requests
    http://127.0.0.1:30000
    http://127.0.0.1:30001  # draining
    http://127.0.0.1:30002  # down

A server marked ``draining`` (a rolling re-flag is about to restart it) or ``down`` (crashed, restarting)
gets no new requests; its requests in flight finish or are retried elsewhere. A URL that disappears is
treated as draining for good; a new URL is added. Any other comment is ignored, so the file is also a
valid plain ``servers_file`` for a run that does not follow it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tokenmill.config.servers import Endpoint, Mark, parse_servers
from tokenmill.fsio import atomic_write

log = logging.getLogger(__name__)

__all__ = ["HEADER", "Endpoint", "Followable", "Mark", "apply", "follow", "parse", "read", "render", "write"]

HEADER = "# tokenmill fleet endpoints: one base URL a line; a `# draining` or `# down` server gets no new requests\n"


def render(endpoints: Iterable[Endpoint]) -> str:
    """The file's text."""
    lines = [HEADER]
    for ep in endpoints:
        lines.append(ep.url + ("" if ep.mark == "up" else f"  # {ep.mark}") + "\n")
    return "".join(lines)


def parse(text: str) -> list[Endpoint]:
    """The endpoints in ``text`` (:func:`tokenmill.config.servers.parse_servers`, the format's one parser)."""
    return parse_servers(text)


def write(path: Path, endpoints: Iterable[Endpoint]) -> None:
    """Replace the file atomically (a reader sees the old or the new list, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, render(endpoints).encode())


def read(path: Path) -> list[Endpoint] | None:
    """The endpoints in the file, or None when it cannot be read (the fleet is down, or not up yet)."""
    try:
        return parse(path.read_text())
    except OSError:
        return None


class Followable(Protocol):
    """What :func:`follow` drives (the run's :class:`~tokenmill.run.servers.ServerPool`)."""

    def server_urls(self) -> dict[str, bool]:
        """Each server's URL and whether it is drained."""
        ...

    def set_draining(self, url: str, draining: bool) -> None: ...

    def add_server(self, url: str) -> None: ...


def apply(target: Followable, endpoints: list[Endpoint]) -> list[str]:
    """Make ``target`` follow ``endpoints``; returns one line per change made (for the log)."""
    changes: list[str] = []
    current = target.server_urls()
    listed = set()
    for ep in endpoints:
        listed.add(ep.url)
        drain = not ep.sendable
        if ep.url not in current:
            target.add_server(ep.url)
            changes.append(f"added {ep.url}")
            current[ep.url] = False
        if current[ep.url] != drain:
            target.set_draining(ep.url, drain)
            changes.append(f"{ep.url} {ep.mark}" if drain else f"{ep.url} back in use")
    for url, drained in current.items():
        if url not in listed and not drained:
            target.set_draining(url, True)
            changes.append(f"{url} removed from the fleet")
    return changes


async def follow(path: Path, target: Followable, interval_s: float) -> None:
    """Re-read ``path`` every ``interval_s`` (when it changed) and apply it to ``target``; runs until cancelled."""
    seen: tuple[int, int, int] | None = None
    while True:
        try:
            st = path.stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if stamp is not None and stamp != seen:
            seen = stamp
            endpoints = read(path)
            if endpoints is not None:
                for change in apply(target, endpoints):
                    log.info("fleet: %s", change)
        await asyncio.sleep(interval_s)
