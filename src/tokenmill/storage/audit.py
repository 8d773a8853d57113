"""``tokenmill verify PREFIX``: the whole job at a remote prefix, checked from the prefix alone.

It works from any machine, for the whole job (every writer: the default one and each partition), without the
output directories that wrote it.

Every shard object is read back in full and hashed: it must be listed in its writer's manifest with the same
count, bytes and sha256, hold only whole completion records, and have the ids its index entry lists; a listed
shard must be there. No id may be recorded twice anywhere (shards, and the copies of the failures). ``_SUCCESS``,
when there, must hold the job's totals. Given the input's ids, each must be completed, failed or skipped exactly
once, and nothing else recorded. Problems go into the same :class:`~tokenmill.output.VerifyReport` as the local
checks, under the same kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tokenmill.errors import StoreConflict
from tokenmill.output import VerifyReport
from tokenmill.output.manifest import ManifestEntry
from tokenmill.output.scan import Scan, scan_bytes
from tokenmill.output.verify import match_input
from tokenmill.records import Skip
from tokenmill.storage import index
from tokenmill.storage.prefix import (
    DIR,
    MANIFEST,
    RemoteManifest,
    RemoteShard,
    done_partition,
    manifest_writers,
    shard_of,
    writer_manifest,
)
from tokenmill.storage.store import Store
from tokenmill.storage.verify import check_marker

READ_WORKERS = 4
_CHUNK = 16  # objects held in memory at once, at most


def audit_prefix(store: Store, input_ids: Iterable[str | Skip] | None = None, samples: int = 1) -> VerifyReport:
    """Check the prefix of ``store`` (see the module docstring); ``samples``: the job's answers per row."""
    report = VerifyReport(out=Path(store.shown))
    report.counts.update(
        sealed_shards=0, sealed_records=0, sealed_bytes=0, open_records=0, failed=0, skipped=0, duplicates=0
    )
    listing = store.list()
    claim = _manifest(report, store, MANIFEST)
    if claim is None:
        return report
    listed: dict[str, RemoteShard] = {}
    segments: list[str] = []
    for writer in sorted(manifest_writers(listing), key=lambda w: -1 if w is None else w):
        head = claim if writer is None else _manifest(report, store, writer_manifest(writer))
        if head is None:
            continue
        if head.job_id != claim.job_id:
            report.add("remote-manifest", store.where(writer_manifest(writer)), f"of another job ({head.job_id})")
        listed.update(head.shards)
        segments += head.index
    indexed = _index(store, segments)
    recorded: set[str] = set()
    foreign = set(claim.foreign)
    shards = sorted(n for n in listing if shard_of(n) is not None and n not in foreign)
    for name, data in _read_all(store, shards):
        if data is None:
            report.add("remote-missing", store.where(name), "gone while it was being checked")
            continue
        result = scan_bytes(data, "ok", store.where(name))
        _check_shard(report, store, name, len(data), result, listed.get(name), indexed.get(name))
        _record(report, recorded, result.ids, store.where(name))
    for name in sorted(set(listed) - set(listing)):
        report.add("remote-missing", store.where(name), f"listed ({listed[name].count} completions) but not there")
    skipped_ids, sources = _sides(report, store, listing, recorded)
    report.counts["skipped"] = len(sources)
    check_marker(report, store, listing, listed)
    done = sorted(p for n in listing if (p := done_partition(n)) is not None)
    if done:
        report.notes.append(f"partitions marked done at the prefix: {', '.join(map(str, done))}")
    report.notes.append(
        f"remote {store.shown}: {report.counts['sealed_shards']:,} shard objects read back and hashed "
        f"({report.counts['sealed_records']:,} completions, {report.counts['sealed_bytes']:,} bytes), the whole job"
    )
    if input_ids is not None:
        match_input(report, recorded, skipped_ids, input_ids, samples)
    return report


def _manifest(report: VerifyReport, store: Store, name: str) -> RemoteManifest | None:
    found = store.read(name)
    if found is None:
        report.add("remote-manifest", store.where(name), "missing: this prefix holds no tokenmill job (or not yet)")
        return None
    try:
        return RemoteManifest.decode(found.data, store.where(name))
    except StoreConflict as exc:
        report.add("remote-manifest", store.where(name), str(exc))
        return None


def _index(store: Store, segments: list[str]) -> dict[str, ManifestEntry]:
    out: dict[str, ManifestEntry] = {}
    for _, data in _read_all(store, segments):
        if data is not None:
            out.update(index.decode(data))
    return out


def _read_all(store: Store, names: list[str]) -> Iterator[tuple[str, bytes | None]]:
    """(name, content or None when gone) for each name, a few at a time."""
    with ThreadPoolExecutor(READ_WORKERS) as pool:
        for start in range(0, len(names), _CHUNK):
            chunk = names[start : start + _CHUNK]
            for name, got in zip(chunk, pool.map(store.read, chunk), strict=True):
                yield name, got.data if got is not None else None


def _check_shard(
    report: VerifyReport,
    store: Store,
    name: str,
    size: int,
    result: Scan,
    listed: RemoteShard | None,
    entry: ManifestEntry | None,
) -> None:
    where = store.where(name)
    report.counts["sealed_shards"] += 1
    report.counts["sealed_records"] += result.records
    report.counts["sealed_bytes"] += size
    for line, reason in result.bad:
        report.add("bad-line", where, f"line {line}: {reason}")
    if result.tail:
        report.add("torn", where, f"torn last line ({result.tail} bytes)")
    if listed is None:
        report.add("remote-unlisted", where, "no manifest lists it yet (a stop right after its upload): rerun")
        return
    if (size, result.file_sha256, result.records) != (listed.bytes, listed.sha256, listed.count):
        report.add("remote-mismatch", where, "its size, sha256 or count differs from its manifest line")
    elif entry is not None and entry.ids != result.ids:
        report.add("remote-manifest", where, "its index entry lists other ids")


def _record(report: VerifyReport, recorded: set[str], ids: list[str], where: str) -> None:
    for rid in ids:
        if rid in recorded:
            report.counts["duplicates"] += 1
            report.add("duplicate", where, f"id {rid!r} was already recorded")
        else:
            recorded.add(rid)


def _sides(
    report: VerifyReport, store: Store, listing: dict[str, int], recorded: set[str]
) -> tuple[set[str], set[str]]:
    """The copies of every writer's failures (recorded like completions) and skips: (skipped ids, sources)."""
    names = sorted(n for n in listing if n.startswith(f"{DIR}/failed") or n.startswith(f"{DIR}/skipped"))
    skipped_ids: set[str] = set()
    sources: set[str] = set()
    for name, data in _read_all(store, [n for n in names if n.endswith(".jsonl")]):
        if data is None:
            continue
        if name.startswith(f"{DIR}/failed"):
            result = scan_bytes(data, "failed", store.where(name))
            report.counts["failed"] += result.records
            _record(report, recorded, result.ids, store.where(name))
        else:
            result = scan_bytes(data, "skipped", store.where(name))
            skipped_ids.update(result.ids)
            sources.update(result.sources)
        for line, reason in result.bad:
            report.add("bad-line", store.where(name), f"line {line}: {reason}")
    return skipped_ids, sources
