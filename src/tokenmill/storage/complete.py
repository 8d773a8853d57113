"""When a job is complete at its remote prefix, and who says so: ``_SUCCESS`` and the partitions' done markers.

A job is complete when every prompt is recorded and every shard is uploaded, which a single-machine run knows at
its end, and a split run knows once every partition has said so.

- A single-machine run (the default writer) that finished with every shard uploaded writes ``_SUCCESS``.
- A partition that finished with every shard uploaded writes ``_tokenmill/done.pNNN.json`` (its counts, and how
  many partitions the job was split in), then reads the others' markers: whichever partition finds all of them
  writes ``_SUCCESS``, with a put-if-absent, so it is written once whatever the race.
- ``_SUCCESS`` is written once: a later run that finds it leaves it as it is (the same object), unless its totals
  disagree with the prefix (then it is corrected, with a warning). No normal run withdraws it: only a run asked
  to reopen the finished job (``run --reopen`` after the input grew, ``retry-failed``) takes it down, before its
  first new shard goes up (:meth:`tokenmill.storage.upload.Uploader`), to write it again at its end. A partition
  about to upload new shards takes its own done marker down first.

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


_COUNTED = ("shards", "completions", "bytes", "failed", "skipped")


def write_success(store: Store, job_id: str) -> str | None:
    """Write ``_SUCCESS`` with the job's totals: ``"written"``; ``"kept"`` when this job's is there and says the
    same totals (it is not touched); ``"corrected"`` when this job's is there with other totals (replaced); None
    when one is there that this job did not write (it is left alone)."""
    counts = totals(store)
    found = store.read(MARKER)
    if found is None:
        if store.put_bytes_if_absent(MARKER, success_body(job_id, counts)):
            return "written"
        return "kept" if _ours(store, job_id) else None
    if marker_job(found.data) != job_id:
        return None
    said = orjson.loads(found.data)
    if all(said.get(k) == counts[k] for k in _COUNTED):
        return "kept"
    store.replace_bytes(MARKER, success_body(job_id, counts), found.tag)
    return "corrected"


def is_ours(store: Store, job_id: str) -> bool:
    """``_SUCCESS`` is at the prefix and names ``job_id``: the job is finished there."""
    found = store.read(MARKER)
    return found is not None and marker_job(found.data) == job_id


def mark_done(store: Store, job_id: str, partition: int, count: int, counts: dict[str, int]) -> bool:
    """Partition ``partition`` of ``count`` finished with every shard uploaded: say so, and write ``_SUCCESS``
    when every partition has. True when ``_SUCCESS`` is there (written now or before)."""
    body = {"job_id": job_id, "partition": partition, "partitions": count, **counts, "finished_at": time.time()}
    if not _done_by(store, partition, job_id, count):  # a rerun with nothing new leaves the marker as it is
        store.replace_bytes(done_marker(partition), orjson.dumps(body, option=orjson.OPT_INDENT_2), None)
    done = {p for name in store.list() if (p := done_partition(name)) is not None and p < count}
    done = {p for p in done if _done_by(store, p, job_id, count)}
    if done != set(range(count)):
        return False
    if store.put_bytes_if_absent(MARKER, success_body(job_id, totals(store))):
        return True
    return _ours(store, job_id)


def withdraw_done(store: Store, partition: int) -> bool:
    """Take the partition's done marker down (it has new shards to upload); True when one was there."""
    if store.size(done_marker(partition)) is None:
        return False
    store.remove(done_marker(partition))
    return True


def withdraw_success(store: Store, job_id: str) -> bool:
    """Take this job's ``_SUCCESS`` down, for a run asked to reopen the finished job (and only for one); True
    when it was there."""
    if not is_ours(store, job_id):
        return False
    store.remove(MARKER)
    return True


def _done_by(store: Store, partition: int, job_id: str, count: int) -> bool:
    """The partition's done marker is there, for this job split in ``count``."""
    got = store.read(done_marker(partition))
    try:
        marker = orjson.loads(got.data) if got is not None else {}
    except ValueError:
        return False
    return isinstance(marker, dict) and marker.get("partitions") == count and marker.get("job_id") == job_id


def _ours(store: Store, job_id: str) -> bool:
    found = store.read(MARKER)
    if found is not None and marker_job(found.data) != job_id:
        raise StoreConflict(
            f"{store.where(MARKER)} was not written by this job and is not replaced; every shard and the manifest "
            "are uploaded, but the prefix has no marker of this job"
        )
    return found is not None
