"""When a job is complete at its remote prefix, and who says so: ``_SUCCESS`` and the partitions' done markers.

A job is complete when every prompt is recorded and every shard is uploaded, which a single-machine run knows at
its end, and a split run knows once every partition has said so.

- A single-machine run (the default writer) that finished with every shard uploaded writes ``_SUCCESS``.
- A partition that finished with every shard uploaded writes ``_tokenmill/done.pNNN.json`` (its counts, and how
  many partitions the job was split in), then reads the others' markers: whichever partition finds all of them
  writes ``_SUCCESS``, with a put-if-absent, so it is written once whatever the race.
- A run that is about to upload new shards withdraws this job's ``_SUCCESS`` and its own done marker first.

``_SUCCESS`` holds the whole job's totals: every writer's manifest (shards, completions, bytes) and the copies of
every writer's failures and skips.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from tokenmill.errors import StoreConflict
from tokenmill.output.scan import scan_bytes
from tokenmill.storage.prefix import (
    DIR,
    MARKER,
    RemoteManifest,
    done_marker,
    done_partition,
    manifest_writers,
    marker_job,
    writer_manifest,
)
from tokenmill.storage.store import Store

_FAILED = f"{DIR}/failed"
_SKIPPED = f"{DIR}/skipped"


def totals(store: Store) -> dict[str, int]:
    """The whole job at the prefix: shards, completions and bytes its manifests list, failures and skipped rows."""
    listing = store.list()
    out = {"shards": 0, "completions": 0, "bytes": 0, "failed": 0, "skipped": 0}
    for writer in manifest_writers(listing):
        got = store.read(writer_manifest(writer))
        if got is None:
            continue
        head = RemoteManifest.decode(got.data, store.where(writer_manifest(writer)))
        out["shards"] += len(head.shards)
        out["completions"] += sum(s.count for s in head.shards.values())
        out["bytes"] += sum(s.bytes for s in head.shards.values())
    failed: set[str] = set()
    skipped: set[str] = set()
    for name in sorted(listing):
        if name.startswith((_FAILED, _SKIPPED)) and name.endswith(".jsonl"):
            got = store.read(name)
            if got is None:
                continue
            if name.startswith(_FAILED):
                failed.update(scan_bytes(got.data, "failed", name).ids)
            else:
                skipped.update(scan_bytes(got.data, "skipped", name).sources)
    out["failed"], out["skipped"] = len(failed), len(skipped)
    return out


def success_body(job_id: str, counts: dict[str, int]) -> bytes:
    """The content of ``_SUCCESS``."""
    body: dict[str, Any] = {"job_id": job_id, **counts, "finished_at": time.time()}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def write_success(store: Store, job_id: str) -> bool:
    """Write ``_SUCCESS`` with the job's totals, or bring this job's up to date. False when one is there that
    this job did not write (it is left alone)."""
    body = success_body(job_id, totals(store))
    found = store.read(MARKER)
    if found is None:
        return store.put_bytes_if_absent(MARKER, body) or _ours(store, job_id)
    if marker_job(found.data) != job_id:
        return False
    store.replace_bytes(MARKER, body, found.tag)
    return True


def mark_done(store: Store, job_id: str, partition: int, count: int, counts: dict[str, int]) -> bool:
    """Partition ``partition`` of ``count`` finished with every shard uploaded: say so, and write ``_SUCCESS``
    when every partition has. True when ``_SUCCESS`` is there (written now or before)."""
    body = {"job_id": job_id, "partition": partition, "partitions": count, **counts, "finished_at": time.time()}
    store.replace_bytes(done_marker(partition), orjson.dumps(body, option=orjson.OPT_INDENT_2), None)
    done = {p for name in store.list() if (p := done_partition(name)) is not None and p < count}
    for p in sorted(done):
        got = store.read(done_marker(p))
        marker = orjson.loads(got.data) if got is not None else {}
        if not isinstance(marker, dict) or marker.get("partitions") != count or marker.get("job_id") != job_id:
            done.discard(p)
    if done != set(range(count)):
        return False
    if store.put_bytes_if_absent(MARKER, success_body(job_id, totals(store))):
        return True
    return _ours(store, job_id)


def withdraw(store: Store, job_id: str, partition: int | None) -> list[str]:
    """Take down this job's ``_SUCCESS`` and the partition's done marker (new shards are coming); returns what
    was taken down."""
    gone: list[str] = []
    if partition is not None and store.size(done_marker(partition)) is not None:
        store.remove(done_marker(partition))
        gone.append(done_marker(partition))
    found = store.read(MARKER)
    if found is not None and marker_job(found.data) == job_id:
        store.remove(MARKER)
        gone.append(MARKER)
    return gone


def _ours(store: Store, job_id: str) -> bool:
    found = store.read(MARKER)
    if found is not None and marker_job(found.data) != job_id:
        raise StoreConflict(
            f"{store.where(MARKER)} was not written by this job and is not replaced; every shard and the manifest "
            "are uploaded, but the prefix has no marker of this job"
        )
    return found is not None
