"""What a run reads from outside its job file, once, at its start: the servers and the API key.

The servers are the job's list and its servers file (:func:`~tokenmill.config.servers.read_servers`, with the
file's ``# draining`` / ``# down`` marks); the key is the environment variable the job names (``api_key_env``),
read by :func:`read_api_key` (``tokenmill doctor --api-key-env`` reads it there too).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tokenmill.config import JobSpec
from tokenmill.config.servers import Endpoint, read_servers
from tokenmill.errors import ConfigError


def read_api_key(env_name: str | None, named_by: str = "api_key_env") -> str | None:
    """The API key in the environment variable ``env_name`` (None when no variable is named); ConfigError when
    the variable is not set (``named_by``: the setting or option that names it, for the message)."""
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ConfigError(f"{named_by} names {env_name!r}, but that variable is not set; export it")
    return key


def auth_headers(key: str | None) -> Mapping[str, str]:
    """The headers that carry ``key`` to a server (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


@dataclass(frozen=True, slots=True)
class Access:
    """The servers of a run, with their marks, and its API key."""

    endpoints: tuple[Endpoint, ...]
    api_key: str | None = None

    @property
    def servers(self) -> list[str]:
        """Every server's URL, marked ones too (in order)."""
        return [ep.url for ep in self.endpoints]

    @property
    def headers(self) -> Mapping[str, str]:
        return auth_headers(self.api_key)


def resolve_access(job: JobSpec) -> Access:
    """The servers from the job's list and its servers file (deduplicated in order; a listed server the file
    marks draining or down keeps the mark) and the API key."""
    found: dict[str, Endpoint] = {url: Endpoint(url) for url in job.servers}
    if job.servers_file:
        for ep in read_servers(job.servers_file, "servers_file"):
            found[ep.url] = ep if ep.url not in found or not ep.sendable else found[ep.url]
    if not found:
        raise ConfigError("no servers given: list base URLs under `servers:` or in servers_file")
    return Access(tuple(found.values()), read_api_key(job.api_key_env))
