"""The remote object store: one prefix of any fsspec URL (s3://, gs://, az://, hf://, file://).

This is the only module that imports fsspec. Everything it does is relative to the prefix, by plain object
names that cannot climb out of it; every foreign exception becomes a :class:`StoreError`:
:class:`StoreUnavailable` (worth retrying: unreachable, throttled, access refused) or :class:`StoreConflict`
(never retried: an object is in the way).

Writes never replace an object blindly:
- :meth:`Store.put_file_if_absent` / :meth:`Store.put_bytes_if_absent` create an object only where none
  exists. On S3 this is a conditional put (``If-None-Match: *``, atomic); on a local path a temporary file
  fsynced and hard-linked into place (atomic, and a killed copy never leaves a partial object); on other
  stores an existence check right before the put.
- :meth:`Store.replace_bytes` overwrites an object only while it still has the tag read before (on S3
  ``If-Match`` on the ETag), so a concurrent writer is detected instead of overwritten; on a local path it is
  :func:`tokenmill.fsio.atomic_write`, durable.

How a store does each is its write strategy, picked once from its protocol in
:data:`tokenmill.storage.writes.WRITES` (one table).

Credentials come from the environment or the store's own credential chain (``AWS_*`` variables, profiles,
instance roles, ``GOOGLE_APPLICATION_CREDENTIALS``, ...). ``storage_options`` go to fsspec unchanged: e.g.
``{"endpoint_url": "http://127.0.0.1:9000"}`` for an S3-compatible server (``AWS_ENDPOINT_URL`` works too).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tokenmill.errors import StoreConflict, StoreError, StoreUnavailable
from tokenmill.storage.writes import LOCAL_TMP, Changed, LocalWrites, writes_for

T = TypeVar("T")

log = logging.getLogger(__name__)

# An object name is one path segment or several joined by "/", each made of these characters.
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
# Modules whose exceptions mean "the store failed" (as opposed to a bug in the caller).
_FOREIGN = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "s3fs", "gcsfs", "adlfs", "azure", "google")
_READ_BLOCK = 1 << 20

Hook = Callable[[str, str], None]


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe object name under a prefix, else raise :class:`StoreError`."""
    parts = name.split("/")
    if not name or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise StoreError(
            f"refusing object name {name!r}: names under the remote prefix are plain segments of letters, "
            "digits, '.', '_' and '-' (no '..', no leading '/' or '.')"
        )
    return name


def display_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages and logs."""
    return re.sub(r"^([a-zA-Z0-9+.-]+://)[^/@]*@", r"\1", url)


@dataclass(frozen=True, slots=True)
class Tagged:
    """An object's bytes and the tag that a conditional replace must match (None where not supported)."""

    data: bytes
    tag: str | None


class Store:
    """One remote prefix. Blocking: call it from a worker thread, never from the event loop.

    ``hook(operation, name)`` is called before every remote operation; an exception it raises is handled
    exactly like one from the store (a seam for fault injection).
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *, hook: Hook | None = None):
        if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://.", url):
            raise StoreError(
                f"output.remote {display_url(url)!r} is not a URL: write it with its protocol, e.g. "
                "s3://bucket/prefix/ or file:///srv/corpora/run-1/"
            )
        self.url = url if url.endswith("/") else url + "/"
        self.shown = display_url(self.url)
        self.options: dict[str, Any] = dict(storage_options or {})  # for the stores of prefixes under this one
        self._hook = hook
        try:
            from fsspec.core import url_to_fs
        except ImportError as exc:  # pragma: no cover - fsspec comes with datasets
            raise StoreError("output.remote needs fsspec: pip install 'tokenmill[s3]'") from exc
        try:
            self._fs, root = url_to_fs(self.url, **dict(storage_options or {}))
        except ImportError as exc:
            proto = self.url.split("://", 1)[0]
            extra = " (pip install 'tokenmill[s3]')" if proto in ("s3", "s3a") else ""
            raise StoreError(f"no fsspec driver for {proto}:// is installed{extra}: {exc}") from exc
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"cannot open output.remote {self.shown}: {exc}; check the URL and storage_options"
            ) from exc
        self._root = str(root).rstrip("/")
        loop = getattr(self._fs, "loop", None)  # the event loop an async driver (s3fs, gcsfs, ...) runs on
        if isinstance(loop, asyncio.AbstractEventLoop):
            loop.set_exception_handler(_quiet_lost_connections)
        protocols = self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,)
        self._writes = writes_for(protocols)(self._fs)
        self._local = isinstance(self._writes, LocalWrites)

    @property
    def conditional(self) -> bool:
        """True when puts are atomic create-if-absent on this store (S3, local); else check-then-put."""
        return self._writes.atomic

    def where(self, name: str) -> str:
        """The full URL of ``name`` (for messages)."""
        return self.shown + name

    # -- reading -----------------------------------------------------------------------------------------

    def list(self, partials: bool = False) -> dict[str, int]:
        """Every object under the prefix (recursively): relative name -> size in bytes. The temporary files of
        local puts in progress are left out unless ``partials``."""

        def run() -> dict[str, int]:
            self._fs.invalidate_cache()
            try:
                found = self._fs.find(self._root, detail=True)
            except FileNotFoundError:
                return {}
            out: dict[str, int] = {}
            for path, info in found.items():
                rel = str(path)[len(self._root) :].lstrip("/")
                if not rel or info.get("type", "file") == "directory":
                    continue
                if partials or not rel.rsplit("/", 1)[-1].startswith(LOCAL_TMP):
                    out[rel] = int(info.get("size") or 0)
            return out

        return self._call("list", "", run)

    def size(self, name: str) -> int | None:
        """The size of ``name``, or None when there is no such object."""

        def run() -> int | None:
            self._fs.invalidate_cache(self._path(name))
            try:
                info = self._fs.info(self._path(name))
            except FileNotFoundError:
                return None
            return int(info.get("size") or 0)

        return self._call("stat", name, run)

    def read(self, name: str) -> Tagged | None:
        """A small object's bytes and replace tag, or None when it does not exist."""

        def run() -> Tagged | None:
            path = self._path(name)
            self._fs.invalidate_cache(path)
            try:
                tag = self._fs.info(path).get("ETag") if self._writes.tags else None
                data = self._fs.cat_file(path)
            except FileNotFoundError:
                return None
            return Tagged(bytes(data), str(tag) if tag else None)

        return self._call("read", name, run)

    def get(self, name: str) -> bytes | None:
        """An object's bytes (one request, no replace tag), or None when it does not exist."""

        def run() -> bytes | None:
            path = self._path(name)
            self._fs.invalidate_cache(path)
            try:
                return bytes(self._fs.cat_file(path))
            except FileNotFoundError:
                return None

        return self._call("read", name, run)

    def sha256(self, name: str) -> str | None:
        """The sha256 of an object's content, read in full (streamed); None when it does not exist."""

        def run() -> str | None:
            digest = hashlib.sha256()
            try:
                with self._fs.open(self._path(name), "rb", block_size=8 * _READ_BLOCK) as fh:
                    while chunk := fh.read(_READ_BLOCK):
                        digest.update(chunk)
            except FileNotFoundError:
                return None
            return digest.hexdigest()

        return self._call("read", name, run)

    # -- writing -----------------------------------------------------------------------------------------

    def put_file_if_absent(self, local: Path, name: str) -> bool:
        """Upload ``local`` as ``name`` unless an object is already there. True when it was written."""
        return self._call("put", name, lambda: self._writes.put_file(local, self._path(name)))

    def put_bytes_if_absent(self, name: str, data: bytes) -> bool:
        """Create ``name`` holding ``data`` unless an object is already there. True when it was written."""
        return self._call("put", name, lambda: self._writes.put_bytes(self._path(name), data))

    def replace_bytes(self, name: str, data: bytes, tag: str | None) -> None:
        """Overwrite ``name`` with ``data``, on S3 only while its ETag is still ``tag``."""

        def run() -> None:
            try:
                self._writes.replace(self._path(name), data, tag)
            except Changed as exc:
                raise StoreConflict(
                    f"{self.where(name)} was changed by someone else while this job was updating it: "
                    "another job writes to the same prefix. Stop it, or use another output.remote."
                ) from exc.__cause__

        self._call("put", name, run)

    def publish_file(self, local: Path, name: str) -> None:
        """Write ``local`` as ``name``, replacing any object there (an export, a report: files the user asked for
        by name): first whole as a temporary object beside it, then as ``name``, so ``name`` is never partial."""
        part = f"{check_name(name)}.tokenmill-part-{uuid.uuid4().hex[:12]}"
        self._call("put", name, lambda: self._writes.publish_file(local, self._path(name), self._path(part)))

    def remove(self, name: str) -> None:
        """Delete ``name`` if it exists (used only for this job's own objects)."""

        def run() -> None:
            with contextlib.suppress(FileNotFoundError):
                self._fs.rm_file(self._path(name))

        self._call("delete", name, run)

    def remove_partials(self) -> int:
        """Delete temporary files a killed local put left behind; returns how many."""
        if not self._local:
            return 0
        removed = 0
        for rel in self.list(partials=True):
            if rel.rsplit("/", 1)[-1].startswith(LOCAL_TMP):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self._root}/{rel}")
                    removed += 1
        return removed

    # -- internals ---------------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return f"{self._root}/{check_name(name)}" if self._root else check_name(name)

    def _call(self, op: str, name: str, fn: Callable[[], T]) -> T:
        """Run one remote operation, translating whatever the store raises."""
        try:
            if self._hook is not None:
                self._hook(op, name)
            return fn()
        except StoreError:
            raise
        except PermissionError as exc:
            raise StoreUnavailable(
                f"{op} {self.where(name)}: access denied ({_reason(exc)}); check the credentials in the "
                "environment (e.g. AWS_PROFILE or AWS_ACCESS_KEY_ID) and the bucket's permissions"
            ) from exc
        except FileNotFoundError as exc:
            raise StoreUnavailable(
                f"{op} {self.where(name)}: not found ({_reason(exc)}); check that the bucket exists and the URL "
                "is spelled right"
            ) from exc
        except Exception as exc:
            if not isinstance(exc, OSError | TimeoutError | ConnectionError) and not _is_foreign(exc):
                raise
            raise StoreUnavailable(f"{op} {self.where(name)} failed: {_reason(exc)}") from exc


def _quiet_lost_connections(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The driver's event loop reports a task whose error nobody retrieved: when it is a lost connection (the
    store went away under an upload, whose failure was already reported and is retried), one debug line
    instead of a traceback; anything else goes to the default handler."""
    exc = context.get("exception")
    unretrieved = str(context.get("message", "")).startswith("Task exception was never retrieved")
    if unretrieved and exc is not None and (isinstance(exc, OSError) or _is_foreign(exc)):
        log.debug("a store request task failed after its operation had: %s: %s", type(exc).__name__, exc)
        return
    loop.default_exception_handler(context)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def _is_foreign(exc: BaseException) -> bool:
    return any(cls.__module__.split(".", 1)[0] in _FOREIGN for cls in type(exc).__mro__)
