"""Where a reader finds a job: an output directory or a remote prefix (any fsspec URL), as one :class:`Place`.

This module is the one that tells a URL from a path (:func:`is_url`). ``export``, ``inspect``, ``report``,
``status`` and ``verify`` open their ``OUT | PREFIX`` argument here; the corpus reader (``storage/corpus.py``)
reads a place's shards; :func:`records_dir` gives ``status`` and ``report`` a directory holding the job's event
logs, ``job.json``, summary, failures and skips: the output directory itself, or for a prefix the copies under
``_tokenmill/`` fetched into a temporary one, with the counts from every writer's manifest and failure copy
(:func:`~tokenmill.storage.complete.totals`; the shards are not read). The writer of an output directory stays
``output/`` (``OutputDir``): a place is for readers.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import OutputError, StoreError
from tokenmill.output import layout
from tokenmill.storage.complete import totals
from tokenmill.storage.prefix import DIR, MANIFEST
from tokenmill.storage.store import Store, display_url

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# the copied names start so (a partition's events.p001.jsonl and failed.p001.jsonl too)
_FETCHED = (layout.EVENTS.split(".")[0], layout.FAILED.split(".")[0], layout.SKIPPED.split(".")[0], layout.JOB,
            layout.SUMMARY_JSON)  # fmt: skip


def is_url(target: str | Path) -> bool:
    """Whether ``target`` names a remote place (``scheme://...``) rather than a local path."""
    return isinstance(target, str) and _URL.match(target) is not None


@dataclass(frozen=True, slots=True)
class Place:
    """A job's output directory (``path``) or its remote prefix (``store``), and how to show it."""

    shown: str
    path: Path | None = None
    store: Store | None = None

    @property
    def remote(self) -> bool:
        return self.store is not None


def open_place(target: str | Path) -> Place:
    """The place ``target`` names; a local one must be a directory."""
    text = str(target)
    if is_url(text):
        return Place(display_url(text), store=Store(text))
    path = Path(text)
    if not path.is_dir():
        raise OutputError(f"{text} is not a directory: give an output directory OUT, or a remote prefix URL")
    return Place(text, path=path)


@dataclass(frozen=True, slots=True)
class RecordsDir:
    """A local directory holding a job's records, and the job's (completed, failed) where they were counted."""

    root: Path
    recorded: tuple[int, int] | None
    shown: str


@contextmanager
def records_dir(place: Place) -> Iterator[RecordsDir]:
    """``place`` as a directory of its records: itself, or a prefix's copies fetched into a temporary one."""
    if place.store is None:
        assert place.path is not None
        yield RecordsDir(place.path, None, place.shown)
        return
    with tempfile.TemporaryDirectory(prefix="tokenmill-place-") as tmp:
        yield _fetch(place.store, Path(tmp))


def _fetch(store: Store, dest: Path) -> RecordsDir:
    listing = store.list()
    if MANIFEST not in listing:
        raise StoreError(f"{store.shown} holds no tokenmill job (no {MANIFEST}): check the URL and the credentials")
    for name in sorted(listing):
        base = name[len(DIR) + 1 :]
        if not name.startswith(DIR + "/") or "/" in base or not base.startswith(_FETCHED):
            continue
        got = store.read(name)
        if got is not None:
            (dest / base).write_bytes(got.data)
    counts = totals(store)
    return RecordsDir(dest, (counts["completions"], counts["failed"]), store.shown)


def refetch(store: Store, dest: Path) -> tuple[int, int]:
    """The prefix's copies fetched into ``dest`` again (``tokenmill serve``'s refresh); the job's (completed,
    failed) at the prefix now."""
    fetched = _fetch(store, dest)
    assert fetched.recorded is not None
    return fetched.recorded
