"""What a job keeps under its remote prefix, and who owns the prefix.

PREFIX/completions_000000.jsonl    sealed shards, byte-identical to the local ones, written once, never replaced
PREFIX/_tokenmill_manifest.json    the remote manifest: the owning job's id and every uploaded shard (count,
                                   bytes, sha256); written before the first shard, rewritten after shards
PREFIX/_SUCCESS                    the final marker, written last, only when the run finished and every
                                   shard is uploaded; withdrawn when a later run (retry-failed) adds shards

The two bookkeeping objects start with ``_`` so that readers which skip such names (Spark, Hadoop, most
dataset loaders) see only the shards. A prefix is claimed by creating the manifest with a put-if-absent:
of two jobs that start on one prefix at the same moment, one wins and the other is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from tokenmill.errors import StoreConflict
from tokenmill.storage.store import Store

MANIFEST = "_tokenmill_manifest.json"
MARKER = "_SUCCESS"
FORMAT = "tokenmill.storage.prefix-manifest/1"
OWN_NAMES = frozenset({MANIFEST, MARKER})
_SHOWN = 5  # foreign names quoted in a refusal


@dataclass(frozen=True, slots=True)
class RemoteShard:
    """One uploaded shard, as the remote manifest lists it."""

    count: int
    bytes: int
    sha256: str


@dataclass(slots=True)
class RemoteManifest:
    """The remote manifest: the owning job and the shards uploaded so far."""

    job_id: str
    shards: dict[str, RemoteShard] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    def encode(self) -> bytes:
        """The JSON document (shards in name order)."""
        return orjson.dumps(
            {
                "format": FORMAT,
                "job_id": self.job_id,
                "created_at": self.created_at,
                "updated_at": time.time(),
                "shards": {
                    name: {"count": s.count, "bytes": s.bytes, "sha256": s.sha256}
                    for name, s in sorted(self.shards.items())
                },
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
        )

    @classmethod
    def decode(cls, data: bytes, where: str) -> RemoteManifest:
        """Parse a remote manifest; anything else in its place is a :class:`StoreConflict`."""
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict) or obj.get("format") != FORMAT or not isinstance(obj.get("job_id"), str):
                raise ValueError("not a tokenmill remote manifest")
            shards = {
                str(name): RemoteShard(int(s["count"]), int(s["bytes"]), str(s["sha256"]))
                for name, s in dict(obj.get("shards") or {}).items()
            }
            return cls(job_id=obj["job_id"], shards=shards, created_at=float(obj.get("created_at") or 0.0))
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreConflict(
                f"{where} is not a manifest this program wrote ({exc}): the prefix holds someone else's data. "
                "Use another output.remote prefix."
            ) from exc


def marker_body(job_id: str, manifest: RemoteManifest, counts: dict[str, int]) -> bytes:
    """The content of ``_SUCCESS``: the job, and what the finished corpus holds."""
    body: dict[str, Any] = {
        "job_id": job_id,
        "shards": len(manifest.shards),
        "completions": sum(s.count for s in manifest.shards.values()),
        "bytes": sum(s.bytes for s in manifest.shards.values()),
        **counts,
        "finished_at": time.time(),
    }
    return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def marker_job(data: bytes) -> str | None:
    """The job id a ``_SUCCESS`` object names, or None when it is not one of ours."""
    try:
        obj = orjson.loads(data)
    except ValueError:
        return None
    job = obj.get("job_id") if isinstance(obj, dict) else None
    return job if isinstance(job, str) else None


@dataclass(slots=True)
class Claimed:
    """The prefix is this job's: its manifest as found (or just created) and the tag to replace it with."""

    manifest: RemoteManifest
    tag: str | None
    created: bool
    foreign: int  # objects beside ours that this job did not write (only with allow_existing)


def claim(store: Store, job_id: str, allow_existing: bool) -> Claimed:
    """Make sure the prefix belongs to ``job_id``: read its manifest, or create one on a prefix that is
    empty (or, with ``allow_existing``, holds only foreign objects). Refusals are :class:`StoreConflict`."""
    for _ in range(3):  # a lost creation race is re-read once; a third round means something is wrong
        found = store.read(MANIFEST)
        if found is not None:
            manifest = RemoteManifest.decode(found.data, store.where(MANIFEST))
            if manifest.job_id != job_id:
                raise StoreConflict(
                    f"{store.shown} belongs to another job (job id {manifest.job_id}; this output directory is "
                    f"job {job_id}). Its objects are never overwritten: use another output.remote prefix, or "
                    "the output directory that job wrote."
                )
            listing = store.list()
            foreign = sum(1 for n in listing if n not in OWN_NAMES and n not in manifest.shards)
            return Claimed(manifest, found.tag, created=False, foreign=foreign)
        listing = store.list()
        others = sorted(n for n in listing if n not in OWN_NAMES)
        if others and not allow_existing:
            shown = ", ".join(others[:_SHOWN]) + (f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else "")
            raise StoreConflict(
                f"{store.shown} already holds {len(others)} object(s) this job did not write ({shown}). "
                "Refusing to mix a corpus into them: choose an empty prefix, or pass --allow-existing-prefix "
                "to upload beside them (nothing there is ever overwritten)."
            )
        if MARKER in listing:
            others.append(MARKER)
        manifest = RemoteManifest(job_id=job_id)
        if store.put_bytes_if_absent(MANIFEST, manifest.encode()):
            got = store.read(MANIFEST)
            return Claimed(manifest, got.tag if got else None, created=True, foreign=len(others))
    raise StoreConflict(f"{store.where(MANIFEST)} keeps changing: another program is writing to {store.shown}")
