"""A job's live completion records wherever they are: ``export``, ``inspect``, ``report`` and ``regenerate`` read
through :func:`open_corpus`, given an output directory or a remote prefix alike.

Given ``OUT``, every writer's shards (the default writer's and each partition's) are read from ``OUT`` where they
are there, and from the job's ``output.remote`` (``OUT/job.json``'s URL and storage options, credentials from the
environment as for the run) where they are not: shards offloaded after upload, shards taken over from the remote,
the shards of partitions that ran on other machines. Given a ``PREFIX`` (any fsspec URL; or a local copy of one, a
directory holding the prefix's claim), every shard object there. Regeneration rounds come from ``OUT/regenerate/``
and from the prefix's ``_tokenmill/regenerate/``, a local round first; an id's live record is its latest round's
(:func:`~tokenmill.output.rounds.merge_live`).

Nothing is downloaded up front: shards are read one at a time in writer and index order (remote objects a few
ahead, in threads), so memory holds a shard or two, never the corpus. A shard its manifest lists holds exactly
that many records: one that is missing, unreadable or short stops the reader with where the records live and
the command that checks it, so no caller can hand over part of a corpus without saying so.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.errors import OutputError, StoreError
from tokenmill.output import layout, manifest, offload
from tokenmill.output.identity import read_record
from tokenmill.output.records_reader import iter_file, iter_jsonl
from tokenmill.output.rounds import merge_live, rounds
from tokenmill.output.scan import scan_bytes
from tokenmill.records.read import CompletionRecord, id_key
from tokenmill.storage.place import open_place
from tokenmill.storage.prefix import DIR, MANIFEST, RemoteManifest, manifest_writers, shard_of, writer_manifest
from tokenmill.storage.rounds import round_prefixes
from tokenmill.storage.store import Store, display_url
from tokenmill.storage.verify import remote_target

log = logging.getLogger(__name__)

READ_AHEAD = 4  # remote shard objects fetched ahead of the one being read
_FAILED = f"{DIR}/failed"  # the copies of every writer's failed records at a prefix

Writer = int | None


@dataclass(frozen=True, slots=True)
class ShardRef:
    """One shard of the corpus and where it is read from: a local file, else a remote object."""

    name: str
    writer: Writer
    index: int
    count: int | None  # records its manifest lists; None for an open shard, or an upload no manifest lists yet
    path: Path | None = None
    store: Store | None = None

    @property
    def where(self) -> str:
        if self.path is not None:
            return str(self.path)
        assert self.store is not None
        return self.store.where(self.name)

    @property
    def remote(self) -> bool:
        return self.path is None


@dataclass(slots=True)
class Corpus:
    """The completion records of one output (a job, or one of its regeneration rounds) and its rounds."""

    shown: str  # the directory or URL as the user wrote it
    shards: list[ShardRef]
    failed: int  # prompts recorded as failed (never exported)
    rounds: list[tuple[int, Corpus]] = field(default_factory=list)
    local: Path | None = None  # the output directory, when read from one
    check: str = ""  # the command that checks where the records are
    remote: str | None = None  # the job's remote prefix, as shown, when its records are read from there
    remote_note: str | None = None  # why the job's remote prefix was not read, when it was not
    read: dict[str, int] = field(default_factory=dict)  # records read so far, "local" / "remote"

    @property
    def completed(self) -> int | None:
        """Completed records the manifests list (open shards counted as they are read; None if unknown)."""
        if any(s.count is None for s in self.shards):
            return None
        return sum(s.count or 0 for s in self.shards)

    @property
    def listed(self) -> int:
        """Completed records the manifests list (open shards and unlisted uploads not counted)."""
        return sum(s.count or 0 for s in self.shards)

    def iter_base(self) -> Iterator[dict[str, Any]]:
        """Every completion record of this output itself (not its rounds), in writer and shard order."""
        return _iter_shards(self.shards, self.check, self.read)

    def iter_live(self) -> Iterator[CompletionRecord]:
        """Every prompt's live record, typed: its latest round's (``round`` set), else its own."""
        sources = [(number, _reader(rnd)) for number, rnd in self.rounds]
        return map(CompletionRecord.from_json, merge_live(self.iter_base(), sources))


def _reader(rnd: Corpus) -> Callable[[], Iterable[dict[str, Any]]]:
    return lambda: _iter_shards(rnd.shards, rnd.check, {})


def open_corpus(target: str | Path) -> Corpus:
    """The corpus at ``target``: an output directory, a remote prefix URL, or a local copy of a prefix."""
    text = str(target)
    place = open_place(target)
    if place.store is not None:
        return _remote_corpus(place.store, text)
    path = Path(text)
    if (path / MANIFEST).is_file() and not (path / layout.MANIFEST).exists():
        # a downloaded copy of a prefix: read it as the prefix it is (rounds under _tokenmill/ included)
        return _remote_corpus(Store(path.absolute().as_uri()), text)
    return _local_corpus(path, text)


# -- an output directory -------------------------------------------------------------------------------------------


def _local_corpus(out: Path, shown: str) -> Corpus:
    marks = (layout.JOB, layout.MANIFEST, layout.EVENTS, layout.SUMMARY_JSON)
    if not any((out / name).exists() for name in marks) and not any(out.glob("completions_*")):
        raise OutputError(f"{shown} is not an output directory (no job.json, manifest, shards or event log)")
    shards: dict[str, ShardRef] = {}
    gone: dict[str, int] = {}  # listed in a local manifest, no local file: offloaded or taken over
    for writer in [None, *sorted(layout.list_dir(out).partitions)]:
        listing = layout.list_dir(out, writer)
        listed = manifest.read(out / layout.Names(writer).manifest).entries
        for index, (name, _) in listing.sealed.items():
            shards[name] = ShardRef(name, writer, index, _count(listed.get(name)), path=out / name)
        for index, name in listing.open.items():
            sealed = name.removesuffix(".open")
            if sealed not in shards:
                shards[sealed] = ShardRef(sealed, writer, index, _count(listed.get(sealed)), path=out / name)
        gone.update({name: e.count for name, e in listed.items() if name not in shards})
    store, note, job_id = _job_store(out)
    remote_listing: dict[str, int] = {}
    if store is not None:
        try:
            remote_listing = store.list()
        except StoreError as exc:
            store, note = None, f"its output.remote cannot be listed ({exc})"
    failed = _local_failed(out)
    head = _prefix(store, remote_listing) if store is not None else None
    if store is not None and head is not None and head.job_id not in (None, job_id):
        note = f"{store.shown} belongs to another job (job id {head.job_id}; {shown} is job {job_id})"
        store = None
    if store is not None and head is not None:  # the job's shards not here: offloaded, taken over, elsewhere
        for name, writer, index in head.shards(remote_listing):
            if name not in shards:
                count = gone.get(name, head.counts.get(name))
                shards[name] = ShardRef(name, writer, index, count, store=store)
        failed |= _remote_failed(store, remote_listing)
    _refuse_missing(shown, gone, shards, store, note, offload.read(out))
    corpus = Corpus(
        shown, _ordered(shards.values()), len(failed), local=out, check=f"tokenmill verify {shown} --remote"
    )
    corpus.remote_note = note
    corpus.remote = store.shown if store is not None else None
    found = {
        rnd.number: _local_corpus(rnd.out, f"{shown.rstrip('/')}/regenerate/{rnd.name}")
        for rnd in rounds(out)
        if (rnd.out / layout.MANIFEST).exists() or read_record(rnd.out) is not None
    }
    if store is not None:  # rounds made on a machine whose directory is gone: at the prefix only
        for number, url in round_prefixes(store, remote_listing).items():
            if number not in found:
                found[number] = _remote_corpus(Store(url, store.options), display_url(url))
    corpus.rounds = sorted(found.items())
    return corpus


def _refuse_missing(
    shown: str,
    gone: dict[str, int],
    shards: dict[str, ShardRef],
    store: Store | None,
    note: str | None,
    offloaded: set[str],
) -> None:
    missing = sorted(set(gone) - set(shards))
    if not missing:
        return
    first = missing[0]
    lives = "at the job's remote prefix only" if first in offloaded or store is None else "nowhere"
    if note is not None:
        why = note
    elif store is None:
        why = "its job.json names no output.remote"
    else:
        why = f"{store.shown} holds no such object"
    records = sum(gone[n] for n in missing)
    named = store.where(first) if store is not None else first
    raise OutputError(
        f"{len(missing):,} shard(s) of {shown} with {records:,} completed records (first: {named}) live {lives} "
        f"and cannot be read: {why}. Set the store's credentials in the environment as for the run, or read the "
        f"job from its prefix (e.g. tokenmill export PREFIX); `tokenmill verify {shown} --remote` shows what is where"
    )


def _ordered(refs: Iterable[ShardRef]) -> list[ShardRef]:
    return sorted(refs, key=lambda s: (-1 if s.writer is None else s.writer, s.index))


def _count(entry: manifest.ManifestEntry | None) -> int | None:
    return None if entry is None else entry.count


def _job_store(out: Path) -> tuple[Store | None, str | None, str | None]:
    """The job's remote prefix as ``OUT/job.json`` records it (masked secrets left to the environment), why it
    cannot be opened, and the job's id."""
    record = read_record(out)
    job_id = record.job_id or None if record is not None else None
    job = record.job() if record is not None else None
    remote = job.output.remote if job is not None else record.section("output").get("remote") if record else None
    if not remote:
        return None, None, job_id
    try:
        url, options, _ = remote_target(out)
        return Store(url, options), None, job_id
    except StoreError as exc:
        return None, f"its output.remote cannot be opened ({exc})", job_id


def _local_failed(out: Path) -> set[str]:
    ids: set[str] = set()
    parts = sorted(layout.list_dir(out).partitions)
    for path in [out / layout.FAILED, *(out / layout.Names(p).failed for p in parts)]:
        ids.update(id_key(rec.get("id")) for rec in iter_file(path))
    return ids


def _remote_failed(store: Store, listing: dict[str, int]) -> set[str]:
    ids: set[str] = set()
    for name in sorted(listing):
        if name.startswith(_FAILED) and name.endswith(".jsonl"):
            data = store.get(name)
            if data is not None:
                ids.update(scan_bytes(data, "failed", name).ids)
    return ids


# -- a remote prefix -------------------------------------------------------------------------------------------------


def _remote_corpus(store: Store, shown: str) -> Corpus:
    listing = store.list()
    if MANIFEST not in listing and not any(shard_of(n) for n in listing):
        raise StoreError(
            f"{shown} holds no tokenmill job (no {MANIFEST}, no shards): check the URL and the credentials"
        )
    head = _prefix(store, listing)
    counts = head.counts
    absent = sorted(set(counts) - set(listing))
    if absent:
        raise StoreError(
            f"{store.where(absent[0])} (and {len(absent) - 1} more) is listed in the job's manifest with "
            f"{counts[absent[0]]:,} completed records but is not there: run `tokenmill verify {shown}`, then "
            "`tokenmill run JOB --repair-remote` from a machine that holds the shard"
        )
    refs = [ShardRef(name, w, i, counts.get(name), store=store) for name, w, i in head.shards(listing)]
    corpus = Corpus(shown, _ordered(refs), len(_remote_failed(store, listing)), check=f"tokenmill verify {shown}")
    corpus.remote = shown
    corpus.rounds = [
        (n, _remote_corpus(Store(url, store.options), f"{shown.rstrip('/')}/{url[len(store.url) :].rstrip('/')}/"))
        for n, url in round_prefixes(store, listing).items()
    ]
    return corpus


@dataclass(frozen=True, slots=True)
class _Prefix:
    """What a prefix's manifests say: records per shard, the owning job, the shard-named objects not the job's."""

    counts: dict[str, int]
    job_id: str | None
    foreign: frozenset[str]

    def shards(self, listing: dict[str, int]) -> list[tuple[str, Writer, int]]:
        """The job's shard objects in ``listing``: (name, writer, index), foreign objects left out."""
        out = []
        for name in listing:
            key = shard_of(name)
            if key is not None and name not in self.foreign:
                out.append((name, key[0], key[1]))
        return out


def _prefix(store: Store, listing: dict[str, int]) -> _Prefix:
    counts: dict[str, int] = {}
    job_id: str | None = None
    foreign: frozenset[str] = frozenset()
    for writer in manifest_writers(listing):
        data = store.get(writer_manifest(writer))
        if data is None:
            continue
        head = RemoteManifest.decode(data, store.where(writer_manifest(writer)))
        counts.update({name: s.count for name, s in head.shards.items()})
        if writer is None:
            job_id, foreign = head.job_id, frozenset(head.foreign)
    return _Prefix(counts, job_id, foreign)


# -- reading ---------------------------------------------------------------------------------------------------------


def _iter_shards(shards: list[ShardRef], check: str, read: dict[str, int]) -> Iterator[dict[str, Any]]:
    """The records of ``shards`` in order; remote objects are fetched up to :data:`READ_AHEAD` ahead."""
    remote = iter([s for s in shards if s.remote])
    with ThreadPoolExecutor(max_workers=READ_AHEAD, thread_name_prefix="tokenmill-read") as pool:
        ahead: deque[Future[bytes | None]] = deque()

        def top_up() -> None:
            while len(ahead) < READ_AHEAD and (ref := next(remote, None)) is not None:
                assert ref.store is not None
                ahead.append(pool.submit(ref.store.get, ref.name))

        for ref in shards:
            top_up()
            if not ref.remote:
                yield from _counted(ref, _local_lines(ref), check, read, "local")
                continue
            data = _result(ref, ahead.popleft(), check)
            top_up()
            yield from _counted(ref, _data_lines(data, ref.where), check, read, "remote")


def _result(ref: ShardRef, fut: Future[bytes | None], check: str) -> bytes:
    try:
        data = fut.result()
    except StoreError as exc:
        raise StoreError(f"{ref.where} cannot be read ({exc}); its {_records(ref)} are not read: {check}") from exc
    if data is None:
        raise StoreError(f"{ref.where} is gone; its {_records(ref)} are not read: {check}")
    return data


def _records(ref: ShardRef) -> str:
    return "records" if ref.count is None else f"{ref.count:,} completed records"


def _counted(
    ref: ShardRef, recs: Iterator[dict[str, Any]], check: str, read: dict[str, int], kind: str
) -> Iterator[dict[str, Any]]:
    n = 0
    for rec in recs:
        n += 1
        yield rec
    read[kind] = read.get(kind, 0) + n
    if ref.count is not None and n != ref.count:
        raise OutputError(
            f"{ref.where} holds {n:,} readable records where its manifest lists {ref.count:,}: "
            f"the corpus is not whole; {check}"
        )


def _local_lines(ref: ShardRef) -> Iterator[dict[str, Any]]:
    assert ref.path is not None
    path = ref.path
    if not path.exists() and path.name.endswith(".open"):
        sealed = path.with_name(ref.name)  # sealed since the listing (a run in progress)
        if sealed.exists():
            path = sealed
    if not path.exists():
        raise OutputError(f"{path} is gone; its {_records(ref)} are not read: run `tokenmill verify` on the directory")
    return iter_file(path)


def _data_lines(data: bytes, where: str) -> Iterator[dict[str, Any]]:
    return iter_jsonl(data.split(b"\n"), where)
