"""The file names inside an output directory, and one listing of what is there.

OUT/completions_000000.jsonl        sealed shards (immutable once renamed into place)
OUT/completions_000001.jsonl.open   the open shard being appended to (at most one)
OUT/manifest.jsonl                  one line per sealed shard, derived from the shards
OUT/failed.jsonl                    prompts that could not be completed
OUT/failed.retry-1.jsonl            failures set aside by ``retry-failed`` (history, not state)
OUT/skipped.jsonl                   input rows skipped under ``on_bad_row: skip``
OUT/offloaded.jsonl                 shards deleted after a verified upload (``output.delete_after_upload``)
OUT/.lock                           held by the one process writing to OUT
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tokenmill.errors import OutputError

MANIFEST = "manifest.jsonl"
FAILED = "failed.jsonl"
SKIPPED = "skipped.jsonl"
OFFLOADED = "offloaded.jsonl"
LOCK = ".lock"
# What an interrupted atomic rewrite (tmp file + rename) can leave behind; safe to delete on open.
LEFTOVERS = frozenset({MANIFEST + ".tmp", SKIPPED + ".tmp"})

_SEALED = re.compile(r"completions_(\d{6,})\.jsonl")
_OPEN = re.compile(r"completions_(\d{6,})\.jsonl\.open")
_ARCHIVED = re.compile(r"failed\.retry-(\d+)\.jsonl")


def shard_name(index: int) -> str:
    """The sealed shard file name for ``index`` (zero-padded so listings sort)."""
    return f"completions_{index:06d}.jsonl"


def open_name(index: int) -> str:
    """The open shard file name for ``index``."""
    return shard_name(index) + ".open"


def archived_failed_name(n: int) -> str:
    """Where ``retry-failed`` moves ``failed.jsonl`` the ``n``-th time."""
    return f"failed.retry-{n}.jsonl"


@dataclass(slots=True)
class Listing:
    """What one directory scan found: sealed shards by index (name, size), open shards, leftovers."""

    sealed: dict[int, tuple[str, int]] = field(default_factory=dict)
    open: dict[int, str] = field(default_factory=dict)
    archived_failed: list[int] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # tmp files of an interrupted atomic rewrite

    @property
    def next_index(self) -> int:
        """The index after the highest shard present, sealed or open."""
        return max([*self.sealed, *self.open], default=-1) + 1


def list_dir(root: Path) -> Listing:
    """One ``scandir`` pass (a ``stat`` per shard, no reads) over ``root``."""
    listing = Listing()
    try:
        with os.scandir(root) as it:
            for entry in it:
                _classify(entry, listing)
    except OSError as exc:
        raise OutputError(f"cannot list output directory {root}: {exc.strerror or exc}") from exc
    listing.archived_failed.sort()
    return listing


def _classify(entry: os.DirEntry[str], listing: Listing) -> None:
    name = entry.name
    if m := _SEALED.fullmatch(name):
        listing.sealed[int(m.group(1))] = (name, entry.stat().st_size)
    elif m := _OPEN.fullmatch(name):
        listing.open[int(m.group(1))] = name
    elif m := _ARCHIVED.fullmatch(name):
        listing.archived_failed.append(int(m.group(1)))
    elif name in LEFTOVERS:
        listing.leftovers.append(name)
