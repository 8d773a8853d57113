"""What an output directory already holds, after repairing what a crash can leave behind.

Repairs are limited to crash damage and to the derived manifest: a torn last line (a write cut short) is
cut from the open shard, ``failed.jsonl``, ``skipped.jsonl`` and the manifest; the manifest is re-derived
for any sealed shard whose line is missing or whose size disagrees; duplicate skip lines are dropped.
Anything else (a bad line in the middle of a file, a shard listed in the manifest but gone) stops with an
:class:`OutputError` that says what to do. Sealed shards are only ``stat``-ed when the manifest agrees, so a
resume reads the manifest and one open shard, never the whole corpus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from tokenmill.errors import OutputError
from tokenmill.output import layout, manifest, offload
from tokenmill.output.fsio import atomic_write, cut, output_error
from tokenmill.output.manifest import ManifestEntry
from tokenmill.output.scan import Kind, Scan, require_clean, scan


@dataclass(slots=True)
class ResumeState:
    """What is already done in an output directory.

    ``done`` holds every id completed (sealed or open shard) or failed (``failed.jsonl``); it is the
    writer's own set and stays current as records are written, so treat it as read-only.
    """

    done: set[str] = field(default_factory=set)
    completed: int = 0
    failed: int = 0
    skipped_sources: set[str] = field(default_factory=set)
    shards: int = 0  # sealed shards
    open_count: int = 0  # completions in the open shard
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repaired: list[str] = field(default_factory=list)  # what was repaired, one sentence each


@dataclass(slots=True)
class OpenShard:
    """The open shard found on disk, ready to be appended to."""

    index: int
    path: Path
    scan: Scan


@dataclass(slots=True)
class Recovered:
    """Everything the writer needs to carry on where the last run stopped."""

    state: ResumeState
    open_shard: OpenShard | None
    next_index: int
    failed_ids: set[str]


def recover(root: Path, partition: int | None = None) -> Recovered:
    """Repair crash damage in ``root``, reconcile the manifest with the shards, and load the done set.

    Only the files of this writer (the default one, or ``partition``) are repaired; the other writers'
    files are read without changing them (they may be writing right now), so the done set holds every id
    recorded in the directory whatever partition recorded it.
    """
    names = layout.Names(partition)
    listing = layout.list_dir(root, partition)
    state = ResumeState()
    _remove_leftovers(root, listing, state)
    open_index = _single_open_shard(root, listing)
    offloaded = offload.of_writer(offload.read(root), partition)
    _load_sealed(root, listing, state, offloaded, names)
    open_shard = _load_open(root, open_index, state, names)
    failed_ids = _load_failed(root, state, names)
    _load_skipped(root, state, names)
    for other in [None, *sorted(listing.partitions)]:
        if other != partition:
            _load_other(root, layout.Names(other), state)
    next_index = max(listing.next_index, offload.next_index(offloaded))
    return Recovered(state=state, open_shard=open_shard, next_index=next_index, failed_ids=failed_ids)


def _load_other(root: Path, names: layout.Names, state: ResumeState) -> None:
    """Add another writer's records to the done set, read-only: torn or bad lines are not records."""
    listing = layout.list_dir(root, names.partition)
    entries = manifest.read(root / names.manifest).entries
    ids: list[str] = []
    for name, size in listing.sealed.values():
        entry = entries.pop(name, None)
        if entry is not None and entry.bytes == size:
            ids += entry.ids
            state.completed += entry.count
            state.prompt_tokens += entry.prompt_tokens
            state.completion_tokens += entry.completion_tokens
        else:
            ids += _add_scan(scan(root / name, "ok"), state)
    for entry in entries.values():  # listed but not here (offloaded after upload): still done
        ids += entry.ids
        state.completed += entry.count
    for name in listing.open.values():
        ids += _add_scan(scan(root / name, "ok"), state)
    state.done.update(ids)
    failed = set(scan(root / names.failed, "failed").ids)
    state.failed += len(failed - state.done)
    state.done.update(failed)
    state.skipped_sources.update(scan(root / names.skipped, "skipped").sources)


def _add_scan(result: Scan, state: ResumeState) -> list[str]:
    state.completed += result.records
    state.prompt_tokens += result.prompt_tokens
    state.completion_tokens += result.completion_tokens
    return result.ids


def _remove_leftovers(root: Path, listing: layout.Listing, state: ResumeState) -> None:
    for name in listing.leftovers:
        try:
            (root / name).unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise output_error(exc, "removing", root / name) from exc
        state.repaired.append(f"removed {name}, left by an interrupted rewrite")


def _single_open_shard(root: Path, listing: layout.Listing) -> int | None:
    if len(listing.open) > 1:
        names = ", ".join(sorted(listing.open.values()))
        raise OutputError(
            f"{root} holds several open shards ({names}), which one writer never leaves: another program "
            "wrote here. Move all but one aside (their prompts will be generated again) and rerun."
        )
    for index, name in listing.open.items():
        if index in listing.sealed:
            raise OutputError(
                f"{root} holds both {name} and {listing.sealed[index][0]}: move {name} aside (its prompts "
                "will be generated again) and rerun."
            )
        return index
    return None


def _load_sealed(
    root: Path, listing: layout.Listing, state: ResumeState, offloaded: set[str], names: layout.Names
) -> None:
    path = root / names.manifest
    read = manifest.read(path)
    dirty = bool(read.bad or read.duplicates)
    if read.bad:
        line, reason = read.bad[0]
        state.repaired.append(
            f"dropped {len(read.bad)} unreadable line(s) from {names.manifest} (first: line {line}, "
            f"{reason}); the shards they described were indexed again"
        )
    if read.duplicates:
        state.repaired.append(f"dropped {len(read.duplicates)} repeated line(s) from {names.manifest}")
    on_disk = {name for name, _ in listing.sealed.values()}
    remote_only = {n: e for n, e in read.entries.items() if n in offloaded and n not in on_disk}
    _check_missing(path, listing, {n: e for n, e in read.entries.items() if n not in remote_only})
    entries: list[ManifestEntry] = []
    for index in sorted(listing.sealed):
        name, size = listing.sealed[index]
        entry = read.entries.get(name)
        if entry is None or entry.bytes != size:
            entry = _index_shard(root / name, entry, size, state)
            dirty = True
        entries.append(entry)
    entries = sorted([*entries, *remote_only.values()], key=lambda e: e.shard)
    for entry in entries:
        state.done.update(entry.ids)
        state.completed += entry.count
        state.prompt_tokens += entry.prompt_tokens
        state.completion_tokens += entry.completion_tokens
    state.shards = len(entries)
    if dirty:
        manifest.rewrite(path, entries)
    elif read.tail:
        cut(path, read.good_bytes)
    if read.tail:
        state.repaired.append(f"cut a torn last line ({read.tail} bytes) from {names.manifest}")


def _check_missing(path: Path, listing: layout.Listing, entries: dict[str, ManifestEntry]) -> None:
    on_disk = {name for name, _ in listing.sealed.values()}
    missing = sorted(name for name in entries if name not in on_disk)
    if missing:
        count = sum(entries[name].count for name in missing)
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise OutputError(
            f"{path} lists {shown} ({count} completions) but the file(s) are missing: "
            "they were deleted or moved. Put them back (e.g. from the remote copy) and rerun; or, to "
            "generate those prompts again, delete their lines from the manifest."
        )


def _index_shard(path: Path, old: ManifestEntry | None, size: int, state: ResumeState) -> ManifestEntry:
    result = scan(path, "ok")
    fix = "move the shard aside (its prompts will be generated again) and rerun"
    require_clean(result, fix)
    if result.tail:
        raise OutputError(f"sealed shard {path} ends in a torn line ({result.tail} bytes): {fix}")
    try:
        sealed_at = path.stat().st_mtime
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    if old is None:
        state.repaired.append(f"indexed {path.name} ({result.records} records), which had no manifest line")
    else:
        state.repaired.append(
            f"indexed {path.name} again: its size ({size} bytes) disagreed with the manifest ({old.bytes} bytes)"
        )
    return ManifestEntry(
        shard=path.name,
        count=result.records,
        bytes=result.good_bytes,
        sha256=result.file_sha256,
        ids=result.ids,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        sealed_at=sealed_at,
    )


def _load_open(root: Path, index: int | None, state: ResumeState, names: layout.Names) -> OpenShard | None:
    if index is None:
        return None
    path = root / names.open(index)
    result = _scan_repaired(path, "ok", state)
    state.done.update(result.ids)
    state.completed += result.records
    state.open_count = result.records
    state.prompt_tokens += result.prompt_tokens
    state.completion_tokens += result.completion_tokens
    return OpenShard(index=index, path=path, scan=result)


def _load_failed(root: Path, state: ResumeState, names: layout.Names) -> set[str]:
    result = _scan_repaired(root / names.failed, "failed", state)
    failed = set(result.ids)
    state.failed = len(failed)
    state.done.update(failed)
    return failed


def _load_skipped(root: Path, state: ResumeState, names: layout.Names) -> None:
    path = root / names.skipped
    result = _scan_repaired(path, "skipped", state)
    state.skipped_sources.update(result.sources)
    repeats = len(result.sources) - len(state.skipped_sources)
    if repeats:
        _dedupe_skips(path)
        state.repaired.append(f"removed {repeats} repeated line(s) from {names.skipped}")


def _scan_repaired(path: Path, kind: Kind, state: ResumeState) -> Scan:
    result = scan(path, kind)
    require_clean(result, f"move {path.name} aside (what it records will be redone) and rerun")
    if result.tail:
        cut(path, result.good_bytes)
        state.repaired.append(f"cut a torn last line ({result.tail} bytes) from {path.name}")
        result.tail = 0
    return result


def _dedupe_skips(path: Path) -> None:
    seen: set[str] = set()
    kept: list[bytes] = []
    try:
        with path.open("rb") as fh:
            for line in fh:
                source = orjson.loads(line)["source"]
                if source not in seen:
                    seen.add(source)
                    kept.append(line)
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    atomic_write(path, b"".join(kept))
