"""Taking a writer's records over from the remote copy into an output directory that holds none of them.

This is what a fresh machine does before the first run of a job whose records are at ``output.remote``.

Each remote shard becomes a manifest line (its ids included) and is recorded in ``offloaded.jsonl``: the shard
lives at the remote only, so a resume knows its ids and never reuses its name, and ``verify`` counts it as
offloaded (``verify --remote`` reads it back). Failures and skips are written locally as the remote copy holds
them (joined with any the directory holds already; a failure whose id a shard completes is left out: a later run
retried it). The manifest is written last: until it is, the directory holds none of the writer's records, and a
start killed half-way takes them over again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from tokenmill.output import layout, manifest, offload
from tokenmill.output.fsio import atomic_write, output_error
from tokenmill.output.manifest import ManifestEntry
from tokenmill.records.read import id_key, record_id


@dataclass(frozen=True, slots=True)
class TakenOver:
    """What :func:`take_over` wrote."""

    shards: int
    completions: int
    failed: int
    skipped: int

    def line(self) -> str:
        return (
            f"{self.shards} shard(s) with {self.completions:,} completions, {self.failed:,} failure(s) and "
            f"{self.skipped:,} skipped row(s)"
        )


def holds_records(root: Path, partition: int | None) -> bool:
    """Whether the writer (the default one, or ``partition``) has any shard or manifest line in ``root``."""
    if not root.is_dir():
        return False
    listing = layout.list_dir(root, partition)
    if listing.sealed or listing.open:
        return True
    return bool(manifest.read(root / layout.Names(partition).manifest).entries)


def take_over(
    root: Path,
    partition: int | None,
    entries: list[ManifestEntry],
    where: Callable[[str], str],
    failed: bytes = b"",
    skipped: bytes = b"",
) -> TakenOver:
    """Write the writer's remote records into ``root`` (locked by the caller, holding none of its records);
    ``where(shard)`` is the shard's remote URL, for ``offloaded.jsonl``."""
    names = layout.Names(partition)
    entries = sorted(entries, key=lambda e: e.shard)
    remote_failed = {rid for line in failed.splitlines() if (rid := _key(line, "id")) is not None}
    completed = {rid for e in entries for rid in e.ids if rid in remote_failed}  # not a set of every id
    n_failed = _join(root / names.failed, failed, "id", completed)
    n_skipped = _join(root / names.skipped, skipped, "source", set())
    offload.record_many(root, [(e.shard, e.sha256, where(e.shard)) for e in entries])
    manifest.rewrite(root / names.manifest, entries)
    return TakenOver(len(entries), sum(e.count for e in entries), n_failed, n_skipped)


def _join(path: Path, remote: bytes, key: str, drop: set[str]) -> int:
    """Write ``path`` as its whole lines plus the whole lines of ``remote`` whose ``key`` it lacks (and that
    are not in ``drop``); returns the records added."""
    try:
        local = path.read_bytes()
    except FileNotFoundError:
        local = b""
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    local = local[: local.rfind(b"\n") + 1]  # a torn last line is not a record
    seen = {_key(line, key) for line in local.splitlines()}
    added: list[bytes] = []
    whole = remote[: remote.rfind(b"\n") + 1]
    for line in whole.splitlines():
        value = _key(line, key)
        if value is None or value in seen or value in drop:
            continue
        seen.add(value)
        added.append(line + b"\n")
    if added:
        atomic_write(path, local + b"".join(added))
    return len(added)


def _key(line: bytes, key: str) -> str | None:
    try:
        obj = orjson.loads(line)
    except ValueError:
        return None
    value = obj.get(key) if isinstance(obj, dict) else None
    rid = record_id(value)  # an integer id keys on its decimal string, as the done set does
    return None if rid is None else id_key(rid)
