"""A job's remote prefix read back and checked: every writer's shards with their ids, failures and skips.

This is what lets the done set be rebuilt from the remote prefix alone.

For each writer (the default one, and every partition with a manifest or a shard object at the prefix):

1. its manifest lists shards (count, bytes, sha256) and the index segments that hold their ids;
2. a listed shard is taken from the index when the index entry agrees with the manifest and the object has the
   manifest's size; otherwise the object is read and hashed, and must have the manifest's size and sha256;
3. a shard object no manifest lists yet (uploaded just before its writer stopped) is read: a whole file of
   completion records is done; anything else is a disagreement;
4. no id may be recorded twice across the prefix (a failure recorded again as a completion is superseded: a
   later run retried it).

Disagreements (a listed object missing or different, an object that is not a whole shard, an id twice) are
collected, never guessed around: :meth:`RemoteState.check` raises a :class:`StoreConflict` naming them and the
repair (``--repair-remote``), and :func:`repair` makes the manifests match the objects, moving any object that
disagrees to ``_tokenmill/aside/`` (kept, never deleted); the prompts concerned are generated again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from tokenmill.errors import StoreConflict
from tokenmill.output import layout
from tokenmill.output.manifest import ManifestEntry
from tokenmill.output.scan import Scan, scan_bytes
from tokenmill.storage import index
from tokenmill.storage.prefix import (
    MANIFEST,
    RemoteManifest,
    RemoteShard,
    Writer,
    aside_name,
    manifest_writers,
    shard_of,
    side_name,
    writer_manifest,
)
from tokenmill.storage.store import Store, Tagged

log = logging.getLogger(__name__)

READ_WORKERS = 8  # objects read at once
_SHOWN = 5

T = TypeVar("T")
R = TypeVar("R")

Fix = Literal["drop", "aside"]  # drop the manifest line; or move the object aside (and drop its line)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One place where the prefix disagrees with itself, and what :func:`repair` does about it."""

    writer: Writer
    name: str
    why: str
    fix: Fix


@dataclass(slots=True)
class WriterState:
    """One writer at the prefix: its manifest, and (once resolved) its shards with their ids."""

    writer: Writer
    head: RemoteManifest | None
    tag: str | None
    entries: dict[str, ManifestEntry] = field(default_factory=dict)  # every shard taken as done, by name
    unlisted: set[str] = field(default_factory=set)  # shards no manifest lists yet, read from their objects
    from_bodies: int = 0  # shards whose ids were read from the object
    failed: Scan | None = None  # the copy of its failed records (ids)
    failed_data: bytes = b""  # ... as uploaded
    skipped_data: bytes = b""  # the copy of its skipped rows, as uploaded
    resolved: bool = False

    @property
    def names(self) -> set[str]:
        """The shards its manifest lists."""
        return set(self.head.shards) if self.head is not None else set()

    def ids(self) -> Iterable[str]:
        for entry in self.entries.values():
            yield from entry.ids


@dataclass(slots=True)
class RemoteState:
    """The prefix as read by :func:`read_remote`."""

    store: Store
    listing: dict[str, int]
    claim: RemoteManifest | None
    claim_tag: str | None
    writers: dict[Writer, WriterState] = field(default_factory=dict)
    problems: list[Disagreement] = field(default_factory=list)
    superseded: int = 0  # failures whose ids a later run completed

    def check(self) -> None:
        """Raise a :class:`StoreConflict` naming the disagreements, with the repair, if there is any."""
        if not self.problems:
            return
        shown = "; ".join(f"{self.store.where(p.name)}: {p.why}" for p in self.problems[:_SHOWN])
        more = f" (and {len(self.problems) - _SHOWN} more)" if len(self.problems) > _SHOWN else ""
        raise StoreConflict(
            f"the remote prefix {self.store.shown} disagrees with itself: {shown}{more}. Nothing was generated. "
            "To repair it, rerun with --repair-remote: each manifest is made to match the objects, an object that "
            "disagrees is moved to _tokenmill/aside/ (kept), and the prompts concerned are generated again. Or put "
            "the objects back from a copy and rerun."
        )

    def done(self, skip: Iterable[Writer] = ()) -> tuple[set[str], int, int]:
        """(ids, completions, failures) recorded by the resolved writers but those in ``skip``."""
        left_out = set(skip)
        ids: set[str] = set()
        completed = failed = 0
        for ws in self.writers.values():
            if ws.writer in left_out or not ws.resolved:
                continue
            for entry in ws.entries.values():
                ids.update(entry.ids)
                completed += entry.count
        for ws in self.writers.values():
            if ws.writer in left_out or not ws.resolved or ws.failed is None:
                continue
            new = set(ws.failed.ids) - ids
            failed += len(new)
            ids.update(new)
        return ids, completed, failed

    def writer(self, writer: Writer) -> WriterState | None:
        return self.writers.get(writer)


def read_remote(
    store: Store, resolve: Callable[[Writer], bool] = lambda w: True, workers: int = READ_WORKERS
) -> RemoteState:
    """Read the prefix: the listing, the claim, every writer's manifest; writers for which ``resolve`` is true
    get their shards resolved to ids (index segments first, objects where needed). Disagreements are collected
    in ``problems`` (see :meth:`RemoteState.check`)."""
    # The manifests are read before the listing that checks them: a writer uploads a shard before any manifest
    # lists it, so every shard a manifest read here lists is in a listing taken afterwards (writers may be
    # running). A manifest that appears in that listing is read too, and the prefix listed again.
    heads: dict[Writer, Tagged | None] = {}
    listing = store.list()
    while True:
        new = [w for w in manifest_writers(listing) if w not in heads]
        if not new:
            break
        heads.update(_parallel(workers, new, lambda w: store.read(writer_manifest(w))))
        listing = store.list()
    found = heads.get(None)
    claim = RemoteManifest.decode(found.data, store.where(MANIFEST)) if found is not None else None
    foreign = set(claim.foreign) if claim is not None else set()
    state = RemoteState(store, listing, claim, found.tag if found else None)
    writers = set(heads)
    for name in listing:
        shard = shard_of(name)
        if shard is not None and name not in foreign:
            writers.add(shard[0])
    for w in writers:
        got = heads.get(w)
        head = RemoteManifest.decode(got.data, store.where(writer_manifest(w))) if got is not None else None
        state.writers[w] = WriterState(w, head, got.tag if got else None)
    wanted = [ws for w, ws in state.writers.items() if resolve(w)]
    _resolve(state, wanted, foreign, workers)
    return state


def _resolve(state: RemoteState, wanted: list[WriterState], foreign: set[str], workers: int) -> None:
    store, listing = state.store, state.listing
    segments = [n for ws in wanted if ws.head is not None for n in ws.head.index]
    indexed: dict[str, ManifestEntry] = {}
    for got in _parallel(workers, segments, store.read).values():
        if got is not None:
            indexed.update(index.decode(got.data))
    bodies: list[tuple[WriterState, str, RemoteShard | None]] = []
    for ws in wanted:
        ws.resolved = True
        listed = ws.head.shards if ws.head is not None else {}
        for name, sh in sorted(listed.items()):
            size = listing.get(name)
            entry = indexed.get(name)
            if size is None:
                state.problems.append(
                    Disagreement(ws.writer, name, f"listed ({sh.count} completions) but the object is gone", "drop")
                )
            elif size != sh.bytes:
                why = f"{size} bytes, the manifest says {sh.bytes}"
                state.problems.append(Disagreement(ws.writer, name, why, "aside"))
            elif entry is not None and (entry.count, entry.bytes, entry.sha256) == (sh.count, sh.bytes, sh.sha256):
                ws.entries[name] = entry
            else:
                bodies.append((ws, name, sh))
        for name in sorted(listing):
            shard = shard_of(name)
            if shard is not None and shard[0] == ws.writer and name not in listed and name not in foreign:
                bodies.append((ws, name, None))
        for local in (layout.Names(ws.writer).failed, layout.Names(ws.writer).skipped):
            if side_name(local) in listing:
                bodies.append((ws, side_name(local), None))
    # Each object is dropped once scanned: at most ``workers`` bodies are held at a time, not every one read (a
    # writer killed after many uploads leaves many unlisted shards, 5 MB each or more at long answers).
    read = _streamed(workers, [name for _, name, _ in bodies], store.read)
    for (ws, name, expected), got in zip(bodies, read, strict=True):
        if name.startswith("_"):
            if got is not None and name == side_name(layout.Names(ws.writer).failed):
                ws.failed, ws.failed_data = scan_bytes(got.data, "failed", store.where(name)), got.data
            elif got is not None:
                ws.skipped_data = got.data
            continue
        if got is None:  # gone between the listing and the read
            state.problems.append(Disagreement(ws.writer, name, "the object is gone", "drop"))
            continue
        _take_body(state, ws, name, got.data, expected)
    _check_twice(state, wanted)


def _take_body(state: RemoteState, ws: WriterState, name: str, data: bytes, sh: RemoteShard | None) -> None:
    result = scan_bytes(data, "ok", state.store.where(name))
    whole = result.tail == 0 and result.bad_total == 0 and result.records > 0
    if sh is not None and (result.file_sha256 != sh.sha256 or len(data) != sh.bytes):
        state.problems.append(Disagreement(ws.writer, name, "its content differs from the manifest's sha256", "aside"))
        return
    if sh is None and not whole:
        why = "torn last line" if result.tail else f"{result.bad_total} line(s) that are not completion records"
        state.problems.append(Disagreement(ws.writer, name, f"not a whole shard of this job ({why})", "aside"))
        return
    ws.entries[name] = ManifestEntry(
        shard=name,
        count=result.records,
        bytes=len(data),
        sha256=result.file_sha256,
        ids=result.ids,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        sealed_at=0.0,
    )
    ws.from_bodies += 1
    if sh is None:
        ws.unlisted.add(name)


def _check_twice(state: RemoteState, wanted: list[WriterState]) -> None:
    """No id in two shards (the later shard, by writer and name, is the one set aside); failures a completion
    supersedes are counted."""
    first: dict[str, str] = {}
    order = sorted(
        ((ws, name) for ws in wanted for name in ws.entries),
        key=lambda pair: (pair[0].writer is not None, pair[0].writer or 0, pair[1]),
    )
    bad: set[str] = set()
    for ws, name in order:
        for rid in ws.entries[name].ids:
            where = first.setdefault(rid, name)
            if where != name and name not in bad:
                bad.add(name)
                why = f"id {rid!r} is also in {where}"
                state.problems.append(Disagreement(ws.writer, name, why, "aside"))
    for name in bad:
        for ws in wanted:
            ws.entries.pop(name, None)
            ws.unlisted.discard(name)
    for ws in wanted:
        if ws.failed is not None:
            state.superseded += sum(1 for rid in set(ws.failed.ids) if rid in first)


def repair(state: RemoteState) -> list[str]:
    """Make the manifests match the objects (see the module docstring); returns one line per change. Only for
    a prefix no writer is writing to now."""
    store = state.store
    changes: list[str] = []
    by_writer: dict[Writer, list[Disagreement]] = {}
    for p in state.problems:
        by_writer.setdefault(p.writer, []).append(p)
    for writer, problems in by_writer.items():
        ws = state.writers[writer]
        head = ws.head if ws.head is not None else RemoteManifest(job_id=state.claim.job_id if state.claim else "")
        for p in problems:
            if p.fix == "aside" and p.name in state.listing:
                got = store.read(p.name)
                if got is not None:
                    store.put_bytes_if_absent(aside_name(p.name), got.data)
                    store.remove(p.name)
                changes.append(f"moved {p.name} to {aside_name(p.name)} ({p.why})")
            if head.shards.pop(p.name, None) is not None:
                changes.append(f"dropped {p.name} from {writer_manifest(writer)} ({p.why})")
        if ws.head is None:
            store.put_bytes_if_absent(writer_manifest(writer), head.encode())
        else:
            store.replace_bytes(writer_manifest(writer), head.encode(), ws.tag)
    for line in changes:
        log.warning("remote repaired: %s", line)
    return changes


def _streamed(workers: int, items: list[T], fn: Callable[[T], R]) -> Iterator[R]:
    """``fn(item)`` of every item, in order, computed ``workers`` at a time; at most ``workers`` results wait
    to be taken, so a caller that drops each one holds no more than that."""
    if len(items) <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        ahead: deque[Future[R]] = deque(pool.submit(fn, item) for item in items[:workers])
        queued = iter(items[workers:])
        while ahead:
            result = ahead.popleft().result()
            for item in queued:
                ahead.append(pool.submit(fn, item))
                break
            yield result
            del result


def _parallel(workers: int, items: list[T], fn: Callable[[T], R]) -> dict[T, R]:
    if not items:
        return {}
    if len(items) == 1:
        return {items[0]: fn(items[0])}
    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        return dict(zip(items, pool.map(fn, items), strict=True))
