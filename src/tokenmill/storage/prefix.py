"""What a job keeps under its remote prefix, and who owns the prefix.

PREFIX/completions_000000.jsonl        sealed shards, byte-identical to the local ones, written once, never
PREFIX/completions_p002_000000.jsonl   replaced (a partition's shards carry its number, as locally)
PREFIX/_tokenmill_manifest.json        the claim: the owning job (its job.json record) and the manifest of the
                                       default writer's shards (count, bytes, sha256); created before any shard
PREFIX/_tokenmill/manifest.p002.json   partition 2's manifest (the same format; one per partition, so
                                       partitions never rewrite each other's objects)
PREFIX/_tokenmill/ids/*.jsonl          index segments: the local manifest lines (ids included) of the shards a
                                       manifest lists, written once under a name made of their sha256
PREFIX/_tokenmill/failed.jsonl, ...    the local failed/skipped records, event logs, job.json and summary,
                                       copied as they grow (``failed.p002.jsonl`` for partition 2)
PREFIX/_tokenmill/done.p002.json       partition 2 finished with every shard uploaded (its counts)
PREFIX/_SUCCESS                        the final marker, written once, last, when the whole job is complete
                                       and every shard is uploaded; withdrawn only by a run asked to reopen
                                       the finished job (its input grew: ``run --reopen``; ``retry-failed``)

Everything but the shards starts with ``_`` so that readers which skip such names (Spark, Hadoop, most dataset
loaders) see only the shards. A prefix is claimed by creating the claim with a put-if-absent: of two jobs that
start on one prefix at the same moment, one wins and the other is refused; the partitions of one job share it.
A manifest is the fast way to what is done, never a second truth: :mod:`tokenmill.storage.readback` checks it
against the objects.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tokenmill.errors import StoreConflict
from tokenmill.storage.store import Store

MANIFEST = "_tokenmill_manifest.json"
MARKER = "_SUCCESS"
DIR = "_tokenmill"
INDEX_DIR = f"{DIR}/ids"
FORMAT = "tokenmill.storage.prefix-manifest/1"  # later fields (index, job, foreign) are optional: readers of
# the first version read the shards of a newer manifest and ignore the rest
OWN_NAMES = frozenset({MANIFEST, MARKER})
SHARD = re.compile(r"completions_(?:p(\d{3,})_)?(\d{6,})\.jsonl")
_WRITER_MANIFEST = re.compile(rf"{DIR}/manifest\.p(\d{{3,}})\.json")
_DONE = re.compile(rf"{DIR}/done\.p(\d{{3,}})\.json")
_SHOWN = 5  # foreign names quoted in a refusal

Writer = int | None  # None: the default writer; N: partition N of a split run


def writer_manifest(writer: Writer) -> str:
    """The name of ``writer``'s manifest: the claim itself for the default writer."""
    return MANIFEST if writer is None else f"{DIR}/manifest.p{writer:03d}.json"


def manifest_writers(names: Iterable[str]) -> set[Writer]:
    """The writers whose manifests are among ``names`` (None: the claim, the default writer's)."""
    out: set[Writer] = set()
    for name in names:
        if name == MANIFEST:
            out.add(None)
        elif m := _WRITER_MANIFEST.fullmatch(name):
            out.add(int(m.group(1)))
    return out


def shard_of(name: str) -> tuple[Writer, int] | None:
    """(writer, index) of the shard object ``name``, or None when ``name`` is no shard name."""
    m = SHARD.fullmatch(name)
    if m is None:
        return None
    return (None if m.group(1) is None else int(m.group(1))), int(m.group(2))


def side_name(local: str) -> str:
    """Where the local file ``local`` (failed.jsonl, events.p001.jsonl, job.json, ...) is copied."""
    return f"{DIR}/{local}"


def done_marker(partition: int) -> str:
    """The object saying partition ``partition`` finished with every shard uploaded."""
    return f"{DIR}/done.p{partition:03d}.json"


def done_partition(name: str) -> int | None:
    """The partition a done marker ``name`` is for, or None when it is no done marker."""
    m = _DONE.fullmatch(name)
    return int(m.group(1)) if m else None


def index_name(writer: Writer, data: bytes) -> str:
    """The name of an index segment holding ``data``: written once, never replaced (its name is its content)."""
    tag = "w" if writer is None else f"p{writer:03d}"
    return f"{INDEX_DIR}/{tag}-{hashlib.sha256(data).hexdigest()[:32]}.jsonl"


def aside_name(name: str) -> str:
    """Where a repair moves an object that disagrees with the manifests (kept, never deleted)."""
    return f"{DIR}/aside/{name}"


def is_own(name: str) -> bool:
    """Whether ``name`` is one of the job's bookkeeping objects (not a shard, not someone else's)."""
    return name in OWN_NAMES or name.startswith(DIR + "/")


@dataclass(frozen=True, slots=True)
class RemoteShard:
    """One uploaded shard, as the remote manifest lists it."""

    count: int
    bytes: int
    sha256: str


@dataclass(slots=True)
class RemoteManifest:
    """A writer's remote manifest: the owning job, the shards uploaded so far and the index segments that hold their
    ids. The claim (the default writer's) also holds the job's record and the shard-named objects that were there
    before it."""

    job_id: str
    shards: dict[str, RemoteShard] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    index: list[str] = field(default_factory=list)  # index segments, oldest first
    job: dict[str, Any] | None = None  # the claim only: OUT/job.json as the first run wrote it
    foreign: list[str] = field(default_factory=list)  # the claim only: shard-named objects there before it

    def encode(self) -> bytes:
        """The JSON document (shards in name order)."""
        doc: dict[str, Any] = {
            "format": FORMAT,
            "job_id": self.job_id,
            "created_at": self.created_at,
            "updated_at": time.time(),
            "shards": {
                name: {"count": s.count, "bytes": s.bytes, "sha256": s.sha256}
                for name, s in sorted(self.shards.items())
            },
            "index": self.index,
        }
        if self.job is not None:
            doc["job"] = self.job
        if self.foreign:
            doc["foreign"] = self.foreign
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)

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
            job = obj.get("job")
            return cls(
                job_id=obj["job_id"],
                shards=shards,
                created_at=float(obj.get("created_at") or 0.0),
                index=[str(n) for n in obj.get("index") or []],
                job=job if isinstance(job, dict) else None,
                foreign=[str(n) for n in obj.get("foreign") or []],
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StoreConflict(
                f"{where} is not a manifest this program wrote ({exc}): the prefix holds someone else's data. "
                "Use another output.remote prefix."
            ) from exc


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


def read_claim(store: Store) -> tuple[RemoteManifest, str | None] | None:
    """The claim and its replace tag, or None when the prefix is not claimed."""
    found = store.read(MANIFEST)
    if found is None:
        return None
    return RemoteManifest.decode(found.data, store.where(MANIFEST)), found.tag


def claim(store: Store, job_id: str, allow_existing: bool, record: dict[str, Any] | None = None) -> Claimed:
    """Make sure the prefix belongs to ``job_id``: read its claim, or create one (holding the job's ``record``,
    its job.json) on a prefix that is empty (or, with ``allow_existing``, holds only foreign objects).
    Refusals are :class:`StoreConflict`."""
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
            foreign = sum(1 for n in listing if not is_own(n) and (n in manifest.foreign or shard_of(n) is None))
            return Claimed(manifest, found.tag, created=False, foreign=foreign)
        listing = store.list()
        others = sorted(n for n in listing if not is_own(n))
        if others and not allow_existing:
            shown = ", ".join(others[:_SHOWN]) + (f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else "")
            raise StoreConflict(
                f"{store.shown} already holds {len(others)} object(s) this job did not write ({shown}). "
                "Refusing to mix a corpus into them: choose an empty prefix, or pass --allow-existing-prefix "
                "to upload beside them (nothing there is ever overwritten)."
            )
        if MARKER in listing:
            others.append(MARKER)
        manifest = RemoteManifest(job_id=job_id, job=record, foreign=[n for n in others if shard_of(n) is not None])
        if store.put_bytes_if_absent(MANIFEST, manifest.encode()):
            got = store.read(MANIFEST)
            return Claimed(manifest, got.tag if got else None, created=True, foreign=len(others))
    raise StoreConflict(f"{store.where(MANIFEST)} keeps changing: another program is writing to {store.shown}")
