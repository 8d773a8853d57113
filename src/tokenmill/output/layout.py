"""The file names inside an output directory, and one listing of what is there.

OUT/completions_000000.jsonl        sealed shards (immutable once renamed into place)
OUT/completions_000001.jsonl.open   the open shard being appended to (at most one)
OUT/manifest.jsonl                  one line per sealed shard, derived from the shards
OUT/failed.jsonl                    prompts that could not be completed
OUT/failed.retry-1.jsonl            failures set aside by ``retry-failed`` (history, not state)
OUT/skipped.jsonl                   input rows skipped under ``on_bad_row: skip``
OUT/offloaded.jsonl                 shards deleted after a verified upload (``output.delete_after_upload``)
OUT/job.json                        the job the directory belongs to (:class:`~tokenmill.output.identity.JobRecord`)
OUT/events.jsonl                    the event log: one JSON line per interval (:mod:`tokenmill.monitor.events`)
OUT/summary.json, OUT/summary.md    the end of the last run, as data and as text (:mod:`tokenmill.run.summary`)
OUT/tokenmill.log                   the run's log
OUT/regenerate/                     regeneration rounds (:mod:`tokenmill.output.rounds`)
OUT/report.html, OUT/report/        ``tokenmill report``: the page and its figures
OUT/.lock                           held by the one process writing to OUT

A partitioned run (``run --partitions N``) has one writer per partition P, each with its own files beside
the default ones: ``completions_pPPP_NNNNNN.jsonl[.open]``, ``manifest.pPPP.jsonl``, ``failed.pPPP.jsonl``,
``skipped.pPPP.jsonl``, ``events.pPPP.jsonl``, ``tokenmill.pPPP.log`` and ``.lock.pPPP`` (:class:`Names`). Resume
and ``verify`` read every partition's files; a writer repairs only its own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tokenmill.errors import OutputError
from tokenmill.fsio import is_temporary

MANIFEST = "manifest.jsonl"
FAILED = "failed.jsonl"
SKIPPED = "skipped.jsonl"
OFFLOADED = "offloaded.jsonl"
LOCK = ".lock"
JOB = "job.json"
EVENTS = "events.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
LOG = "tokenmill.log"
ROUNDS = "regenerate"
REPORT = "report.html"  # and its figures in OUT/report/

_SEALED = re.compile(r"completions_(?:p(\d{3,})_)?(\d{6,})\.jsonl")
_OPEN = re.compile(r"completions_(?:p(\d{3,})_)?(\d{6,})\.jsonl\.open")
_PART_FILE = re.compile(r"(?:manifest|failed|skipped)\.p(\d{3,})\.jsonl")
_ARCHIVED = re.compile(r"failed\.retry-(\d+)\.jsonl")


def shard_name(index: int, partition: int | None = None) -> str:
    """The sealed shard file name for ``index`` (zero-padded so listings sort), of a partition if given."""
    tag = "" if partition is None else f"p{partition:03d}_"
    return f"completions_{tag}{index:06d}.jsonl"


def open_name(index: int, partition: int | None = None) -> str:
    """The open shard file name for ``index``."""
    return shard_name(index, partition) + ".open"


@dataclass(frozen=True, slots=True)
class Names:
    """The files of one writer: the default one (``partition`` None) or one partition of a partitioned run."""

    partition: int | None = None

    def _tagged(self, name: str) -> str:
        if self.partition is None:
            return name
        stem, dot, ext = name.rpartition(".")
        return f"{stem}.p{self.partition:03d}{dot}{ext}"

    def shard(self, index: int) -> str:
        return shard_name(index, self.partition)

    def open(self, index: int) -> str:
        return open_name(index, self.partition)

    @property
    def manifest(self) -> str:
        return self._tagged(MANIFEST)

    @property
    def failed(self) -> str:
        return self._tagged(FAILED)

    @property
    def skipped(self) -> str:
        return self._tagged(SKIPPED)

    @property
    def events(self) -> str:
        return self._tagged(EVENTS)

    @property
    def log(self) -> str:
        return self._tagged(LOG)

    @property
    def lock(self) -> str:
        return LOCK if self.partition is None else f"{LOCK}.p{self.partition:03d}"

    def leftover(self, name: str) -> bool:
        """Whether ``name`` is what an interrupted atomic rewrite (tmp file + rename) of one of this writer's files
        leaves behind; safe to delete on open."""
        return any(is_temporary(name, of) for of in (self.manifest, self.failed, self.skipped))


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
    partitions: set[int] = field(default_factory=set)  # every partition with files here (any listing)

    @property
    def next_index(self) -> int:
        """The index after the highest shard present, sealed or open."""
        return max([*self.sealed, *self.open], default=-1) + 1


def list_dir(root: Path, partition: int | None = None) -> Listing:
    """One ``scandir`` pass (a ``stat`` per shard, no reads) over ``root``: the files of one writer (the
    default one, or ``partition``), plus which partitions have files here."""
    listing = Listing()
    try:
        with os.scandir(root) as it:
            for entry in it:
                _classify(entry, listing, Names(partition))
    except OSError as exc:
        raise OutputError(f"cannot list output directory {root}: {exc.strerror or exc}") from exc
    listing.archived_failed.sort()
    return listing


def _partition(group: str | None) -> int | None:
    return None if group is None else int(group)


def _classify(entry: os.DirEntry[str], listing: Listing, names: Names) -> None:
    name = entry.name
    if m := _SEALED.fullmatch(name) or _OPEN.fullmatch(name):
        part = _partition(m.group(1))
        if part is not None:
            listing.partitions.add(part)
        if part != names.partition:
            return
        if name.endswith(".open"):
            listing.open[int(m.group(2))] = name
        else:
            listing.sealed[int(m.group(2))] = (name, entry.stat().st_size)
    elif m := _PART_FILE.fullmatch(name):
        listing.partitions.add(int(m.group(1)))
    elif names.partition is None and (m := _ARCHIVED.fullmatch(name)):
        listing.archived_failed.append(int(m.group(1)))
    elif names.leftover(name):
        listing.leftovers.append(name)
