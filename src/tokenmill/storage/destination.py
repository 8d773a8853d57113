"""Where a command writes a file the user names: a local path, or a URL (s3://, gs://, file://, any fsspec URL).

A URL is never turned into a local path (``s3://bucket/x`` is not ``./s3:/bucket/x``): a command that writes to one
makes its file locally first and then :meth:`RemoteFile.publish` writes it through the store (a temporary object,
then the final one; :meth:`~tokenmill.storage.store.Store.publish_file`); a command that writes only locally
refuses it (``cli/options.py``'s ``LocalPath``), saying what to do instead. Credentials come from the
environment, as for ``output.remote`` (``AWS_*`` variables, profiles, ``AWS_ENDPOINT_URL`` for an S3-compatible
server).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.errors import ConfigError
from tokenmill.storage.place import is_url

__all__ = ["RemoteFile", "is_url"]


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One object at a URL: the prefix it is in and its name there."""

    prefix: str  # ends with "/"
    name: str

    @classmethod
    def parse(cls, url: str, default_name: str) -> RemoteFile:
        """``url`` as prefix and name; a URL ending in ``/`` is a prefix, and the file is ``default_name`` in it."""
        rest = url.partition("://")[2]
        if url.endswith("/"):
            return cls(url, default_name)
        if "/" not in rest.strip("/"):
            raise ConfigError(
                f"{url} names no object: give the file's name (e.g. {url.rstrip('/')}/{default_name}), or end the "
                f"URL with / to write {default_name} in it"
            )
        prefix, _, name = url.rpartition("/")
        return cls(prefix + "/", name)

    @property
    def url(self) -> str:
        from tokenmill.storage.store import display_url

        return display_url(self.prefix + self.name)

    def beside(self, suffix: str) -> RemoteFile:
        """The object named ``name + suffix`` in the same prefix (e.g. the counts file of an export)."""
        return RemoteFile(self.prefix, self.name + suffix)

    def publish(self, local: Path, storage_options: dict[str, Any] | None = None) -> None:
        """Write the local file ``local`` to this URL, replacing any object there (never partially)."""
        from tokenmill.storage.store import Store

        Store(self.prefix, storage_options).publish_file(local, self.name)
