"""The servers file (``servers_file``): one base URL a line, each optionally marked ``# draining`` or ``# down``.

The one parser of the format, for the job's servers, the run that follows the fleet's endpoints file
(:mod:`tokenmill.fleet.endpoints`, which also writes it) and ``tokenmill doctor --servers-file``::

    http://127.0.0.1:30000
    http://127.0.0.1:30001  # draining
    http://127.0.0.1:30002  # down

A server marked ``draining`` (a rolling re-flag is about to restart it) or ``down`` (crashed, restarting) gets no
new requests. Any other comment is ignored, and the last line wins for a repeated URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tokenmill.config.base import normalize_url
from tokenmill.errors import ConfigError

Mark = Literal["up", "draining", "down"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One server of a servers file."""

    url: str
    mark: Mark = "up"

    @property
    def sendable(self) -> bool:
        """Whether a client may send it new requests."""
        return self.mark == "up"


def parse_servers(text: str) -> list[Endpoint]:
    """The servers in ``text`` (order kept, the last line wins for a repeated URL)."""
    found: dict[str, Endpoint] = {}
    for line in text.splitlines():
        url, _, comment = line.partition("#")
        url = url.strip()
        if not url:
            continue
        word = comment.strip().split(" ", 1)[0].lower()
        mark: Mark = "draining" if word == "draining" else "down" if word == "down" else "up"
        norm = normalize_url(url)
        found[norm] = Endpoint(norm, mark)
    return list(found.values())


def read_servers(path: str | Path, named_by: str = "servers_file") -> list[Endpoint]:
    """The servers in the file ``path``; ConfigError when it cannot be read (``named_by``: the setting or option
    that names it, for the message)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{named_by} {str(path)!r} cannot be read: {exc}") from exc
    return parse_servers(text)
