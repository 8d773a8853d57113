"""The store's write strategies: how each kind of store creates an object only where none is, and replaces one.

Creating is put-if-absent, replacing is only while unchanged. :data:`WRITES` maps a protocol to its strategy;
:class:`~tokenmill.storage.store.Store` picks one when it opens and calls nothing else to write. Any other
protocol checks for the object right before a put (not atomic: :attr:`Writes.atomic` says which are).
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from tokenmill import fsio

LOCAL_TMP = ".tokenmill-part-"  # prefix of the temporary files of a local put (cleaned by remove_partials)
_COPY_BLOCK = 1 << 20


class Changed(Exception):
    """A conditional replace found the object changed since its tag was read."""


class Writes:
    """How one kind of store writes: create an object only where none is, and replace one only while unchanged."""

    atomic: ClassVar[bool] = False  # create-if-absent is one atomic operation (else a check right before the put)
    tags: ClassVar[bool] = False  # objects carry a tag that a replace can be made conditional on

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def put_file(self, local: Path, path: str) -> bool:
        """Upload ``local`` to ``path`` unless an object is there; True when it was written."""
        if self.fs.exists(path):
            return False
        self.fs.put_file(str(local), path)
        return True

    def put_bytes(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless an object is there; True when it was written."""
        if self.fs.exists(path):
            return False
        self.fs.pipe_file(path, data)
        return True

    def replace(self, path: str, data: bytes, tag: str | None) -> None:
        """Overwrite ``path`` (while its tag is still ``tag``, where the store has tags: else :class:`Changed`)."""
        self.fs.pipe_file(path, data)

    def publish_file(self, local: Path, path: str, part: str) -> None:
        """Write ``local`` as ``path``, replacing any object there: uploaded whole as the temporary object ``part``
        first, then copied to ``path`` (a reader never sees a partial ``path``), and ``part`` removed."""
        self.fs.put_file(str(local), part)
        try:
            self.fs.copy(part, path)
        except BaseException:
            with contextlib.suppress(Exception):  # the copy's error is the one to report
                self.fs.rm_file(part)
            raise
        self.fs.rm_file(part)


class S3Writes(Writes):
    """S3: conditional puts, ``If-None-Match: *`` to create and ``If-Match`` on the ETag to replace."""

    atomic = True
    tags = True

    def put_file(self, local: Path, path: str) -> bool:
        return _created(lambda: self.fs.put_file(str(local), path, mode="create"))

    def put_bytes(self, path: str, data: bytes) -> bool:
        return _created(lambda: self.fs.pipe_file(path, data, mode="create"))

    def replace(self, path: str, data: bytes, tag: str | None) -> None:
        if not tag:
            self.fs.pipe_file(path, data)
            return
        try:
            self.fs.pipe_file(path, data, IfMatch=tag)
        except OSError as exc:
            if "pre-condition" in str(exc) or "precondition" in str(exc).lower():
                raise Changed() from exc
            raise


class LocalWrites(Writes):
    """A local path: a temporary sibling (fsynced) hard-linked into place to create, renamed over to replace."""

    atomic = True

    def put_file(self, local: Path, path: str) -> bool:
        return self._create(Path(path), lambda fh: _copy_from(local, fh))

    def put_bytes(self, path: str, data: bytes) -> bool:
        return self._create(Path(path), lambda fh: fh.write(data))

    def replace(self, path: str, data: bytes, tag: str | None) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(target, data, durable=True, tmp=_partial(target))

    def publish_file(self, local: Path, path: str, part: str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with fsio.atomic_file(target, durable=True, tmp=_partial(target)) as fh:  # a sibling renamed over it
            _copy_from(local, fh)

    @staticmethod
    def _create(path: Path, write: Callable[[BinaryIO], object]) -> bool:
        if path.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        return fsio.create_file(path, write, tmp=_partial(path))


# Each protocol's write strategy; any other protocol checks for the object right before a put.
WRITES: dict[str, type[Writes]] = {"s3": S3Writes, "s3a": S3Writes, "file": LocalWrites, "local": LocalWrites}


def writes_for(protocols: tuple[str, ...]) -> type[Writes]:
    """The write strategy of a filesystem answering to ``protocols``."""
    return next((WRITES[p] for p in protocols if p in WRITES), Writes)


def _partial(path: Path) -> Path:
    """The temporary file of a local put (left out of listings, swept by :meth:`Store.remove_partials`)."""
    return path.with_name(f"{LOCAL_TMP}{path.name}.{uuid.uuid4().hex[:12]}")


def _created(put: Callable[[], object]) -> bool:
    try:
        put()
    except FileExistsError:
        return False
    return True


def _copy_from(local: Path, fh: BinaryIO) -> None:
    with local.open("rb") as src:
        shutil.copyfileobj(src, fh, _COPY_BLOCK)
