"""``verify OUT --remote``: prove that the remote prefix holds exactly the local sealed shards.

Every sealed shard in the local manifests (the default writer's and each partition's in OUT) must be at the
prefix with the same size and the same sha256 (each remote object is read back in full and hashed), and its
writer's remote manifest must list it with the same count, size and sha256. Shard objects of these writers that
the local output does not know of, a manifest of another job, and a ``_SUCCESS`` that disagrees with the
manifests' totals are reported too. Shards of writers OUT does not hold (partitions that ran elsewhere) are the
business of ``verify PREFIX`` (:mod:`tokenmill.storage.audit`). Problems go into the same
:class:`~tokenmill.output.VerifyReport` as the local checks.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from tokenmill.config import MASKED
from tokenmill.errors import OutputError, StoreConflict, StoreError
from tokenmill.output import VerifyReport, layout, manifest
from tokenmill.output.identity import read_record
from tokenmill.output.manifest import ManifestEntry
from tokenmill.storage.prefix import (
    MANIFEST,
    MARKER,
    RemoteManifest,
    RemoteShard,
    Writer,
    manifest_writers,
    shard_of,
    writer_manifest,
)
from tokenmill.storage.store import Store

HASH_WORKERS = 4  # remote objects read back at once


def remote_target(out: Path, url: str | None = None) -> tuple[str, dict[str, Any], str | None]:
    """The remote URL, storage options and job id recorded in ``OUT/job.json`` (``url`` overrides the URL).

    Masked option values (``***``) are dropped, so credentials come from the environment as in the run.
    """
    try:
        record = read_record(Path(out))
    except OutputError as exc:
        raise OutputError(f"{exc}; or pass the prefix with --remote-url") from exc
    output = record.section("output") if record is not None else {}
    target = url or output.get("remote")
    if not target:
        raise StoreError(
            f"{out} has no output.remote in {layout.JOB}: pass the prefix with --remote-url s3://bucket/prefix/"
        )
    options = _unmasked(dict(output.get("storage_options") or {}))
    return str(target), options, record.job_id if record is not None and record.job_id else None


def verify_remote(report: VerifyReport, out: Path, store: Store, job_id: str | None) -> None:
    """Compare the local sealed shards of ``out`` with the prefix of ``store``; add what differs to ``report``."""
    out = Path(out)
    writers: list[Writer] = [None, *sorted(layout.list_dir(out).partitions)]
    local: dict[str, ManifestEntry] = {}
    for writer in writers:
        local.update(manifest.read(out / layout.Names(writer).manifest).entries)
    listing = store.list()
    claim = _remote_manifest(report, store, job_id, MANIFEST)
    remote = RemoteManifest(job_id=claim.job_id if claim else "")
    for writer in sorted(w for w in manifest_writers(listing) if w is not None):
        head = _remote_manifest(report, store, job_id, writer_manifest(writer))
        if head is not None:
            remote.shards.update(head.shards)
    if claim is not None:
        remote.shards.update(claim.shards)
    present = sorted(name for name in local if name in listing and listing[name] == local[name].bytes)
    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        hashes = dict(zip(present, pool.map(store.sha256, present), strict=True))
    for name, entry in sorted(local.items()):
        _check_shard(report, store, entry, listing.get(name), hashes.get(name), remote if claim else None)
    foreign = set(claim.foreign) if claim is not None else set()
    ours = set(writers)
    for name in sorted(listing):
        shard = shard_of(name)
        if shard is not None and shard[0] in ours and name not in local and name not in foreign:
            report.add("remote-extra", store.where(name), "a shard object the local manifest does not list")
    for name in sorted(n for n, _ in remote.shards.items() if n not in local and n not in listing):
        if (s := shard_of(name)) is not None and s[0] in ours:
            report.add("remote-manifest", store.where(MANIFEST), f"lists {name}, which is neither local nor remote")
    check_marker(report, store, listing, remote.shards)
    matched = [local[n] for n in present if hashes.get(n) == local[n].sha256]
    report.counts.update(
        remote_shards=len(matched),
        remote_records=sum(e.count for e in matched),
        remote_bytes=sum(e.bytes for e in matched),
    )
    report.notes.append(
        f"remote {store.shown}: {len(matched):,} of {len(local):,} sealed shards match "
        f"({report.counts['remote_records']:,} completions, {report.counts['remote_bytes']:,} bytes; "
        "every object read back and hashed)"
    )


def _remote_manifest(report: VerifyReport, store: Store, job_id: str | None, name: str) -> RemoteManifest | None:
    where = store.where(name)
    found = store.read(name)
    if found is None:
        report.add("remote-manifest", where, "missing: nothing was uploaded yet, or this is not the job's prefix")
        return None
    try:
        remote = RemoteManifest.decode(found.data, where)
    except StoreConflict as exc:
        report.add("remote-manifest", where, str(exc))
        return None
    if job_id and remote.job_id != job_id:
        report.add("remote-manifest", where, f"belongs to job {remote.job_id}; this output directory is job {job_id}")
    return remote


def _check_shard(
    report: VerifyReport,
    store: Store,
    entry: ManifestEntry,
    size: int | None,
    sha: str | None,
    remote: RemoteManifest | None,
) -> None:
    where = store.where(entry.shard)
    if size is None:
        report.add("remote-missing", where, f"not uploaded ({entry.count} completions)")
        return
    if size != entry.bytes:
        report.add("remote-mismatch", where, f"{size} bytes remote, {entry.bytes} local")
    elif sha != entry.sha256:
        report.add("remote-mismatch", where, "same size, different sha256")
    if remote is None:
        return
    listed = remote.shards.get(entry.shard)
    if listed is None:
        report.add("remote-unlisted", where, "uploaded, but not in the remote manifest yet")
    elif (listed.count, listed.bytes, listed.sha256) != (entry.count, entry.bytes, entry.sha256):
        report.add("remote-manifest", store.where(MANIFEST), f"its line for {entry.shard} differs from the local one")


def check_marker(report: VerifyReport, store: Store, listing: dict[str, int], listed: dict[str, RemoteShard]) -> None:
    """``_SUCCESS`` at the prefix, when there, must hold the totals of the shards the manifests list."""
    if MARKER not in listing:
        report.notes.append(f"no {MARKER} at {store.shown}: the job has not finished, or its upload is incomplete")
        return
    found = store.read(MARKER)
    try:
        body = orjson.loads(found.data) if found is not None else {}
    except ValueError:
        body = {}
    expected = (len(listed), sum(e.count for e in listed.values()))
    got = (body.get("shards"), body.get("completions")) if isinstance(body, dict) else (None, None)
    if got != expected:
        report.add(
            "remote-marker",
            store.where(MARKER),
            f"says {got[0]} shards / {got[1]} completions; the job's manifests list {expected[0]} / {expected[1]}",
        )


def _unmasked(options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            out[key] = _unmasked(value)
        elif value != MASKED:
            out[key] = value
    return out
