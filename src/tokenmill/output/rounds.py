"""Regeneration rounds: answering chosen prompts of an output again, and which answer of each prompt is live.

OUT/regenerate/round-001.prompts.jsonl   the round's prompts, as they were sent (one input row each)
OUT/regenerate/round-001.json            the round: what was chosen and why, the sampling changes (written last:
                                         a round exists once this file does)
OUT/regenerate/round-001/                the round's own output directory (shards, manifest, failed, job.json,
                                         events): an ordinary run over the prompts file, exactly once each

Nothing is rewritten: sealed shards stay as they were (uploaded copies too). The **live** answer of a prompt is
its record in the latest round that completed it, else its record in OUT itself; earlier answers are kept
aside in place. A prompt whose regeneration failed keeps its earlier answer (the failure is in the round's
``failed.jsonl``). Everything that reads a corpus (``inspect``, ``export``, ``report``, ``regenerate``) goes
through :func:`merge_live` (:mod:`tokenmill.storage.corpus` reads the records wherever they are), and ``verify``
through :func:`superseding`, so no prompt ever has two live answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.output import layout, manifest
from tokenmill.output.fsio import atomic_write, fsync_dir, output_error
from tokenmill.output.records_reader import iter_records
from tokenmill.records.read import id_key

DIR = layout.ROUNDS
FORMAT = "tokenmill.regenerate-round/1"


@dataclass(frozen=True, slots=True)
class Round:
    """One regeneration round of an output directory."""

    number: int
    root: Path  # OUT/regenerate

    @property
    def name(self) -> str:
        return f"round-{self.number:03d}"

    @property
    def header_path(self) -> Path:
        return self.root / f"{self.name}.json"

    @property
    def prompts_path(self) -> Path:
        return self.root / f"{self.name}.prompts.jsonl"

    @property
    def out(self) -> Path:
        """The round's own output directory."""
        return self.root / self.name

    def header(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.header_path.read_bytes())
        except (OSError, ValueError) as exc:
            raise OutputError(f"{self.header_path} is unreadable ({exc}); move it aside to drop the round") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise OutputError(f"{self.header_path} is not a regeneration round; move it aside to drop the round")
        return data

    def progress(self) -> tuple[int, int]:
        """(prompts answered or failed, prompts in the round)."""
        if not self.out.is_dir():
            return 0, int(self.header().get("prompts", 0))
        done = {id_key(r.get("id")) for r in iter_records(self.out)}
        for writer in [None, *sorted(layout.list_dir(self.out).partitions)]:  # shards offloaded after upload too
            for entry in manifest.read(self.out / layout.Names(writer).manifest).entries.values():
                done.update(entry.ids)
        failed = {id_key(r.get("id")) for r in iter_records(self.out, failed=True)}
        return len(done | failed), int(self.header().get("prompts", 0))

    def finished(self) -> bool:
        answered, total = self.progress()
        return answered >= total


def rounds(out: Path) -> list[Round]:
    """The rounds of ``out``, oldest first (only those whose header was written)."""
    root = out / DIR
    if not root.is_dir():
        return []
    found = []
    for path in root.glob("round-*.json"):
        stem = path.name.removesuffix(".json").removeprefix("round-")
        if stem.isdigit():
            found.append(Round(int(stem), root))
    return sorted(found, key=lambda r: r.number)


def create(out: Path, rows: Iterable[dict[str, Any]], header: dict[str, Any]) -> Round:
    """Write the next round of ``out``: its prompts file, then its header (the round exists from then on)."""
    existing = rounds(out)
    rnd = Round((existing[-1].number if existing else 0) + 1, out / DIR)
    try:
        rnd.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(exc, "creating", rnd.root) from exc
    lines = [orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows]
    atomic_write(rnd.prompts_path, b"".join(lines))
    count = len(lines)
    doc = {"format": FORMAT, "round": rnd.number, "prompts": count, "created_at": round(time.time(), 3), **header}
    atomic_write(rnd.header_path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    fsync_dir(rnd.root)
    return rnd


def superseding(out: Path, found: list[Round] | None = None) -> dict[str, int]:
    """Prompt id -> the latest round that answered it (the prompts whose live answer is not in ``out``)."""
    sources = [(r.number, _reader(r.out)) for r in (rounds(out) if found is None else found)]
    return latest_rounds(sources)


RoundRecords = tuple[int, Callable[[], Iterable[dict[str, Any]]]]
"""A round's number and a way to read its completion records (each call reads them afresh)."""


def _reader(root: Path) -> Callable[[], Iterable[dict[str, Any]]]:
    return lambda: iter_records(root) if root.is_dir() else ()


def latest_rounds(sources: list[RoundRecords]) -> dict[str, int]:
    """Prompt id -> the latest of ``sources`` that answered it."""
    latest: dict[str, int] = {}
    for number, read in sorted(sources, key=lambda s: s[0]):
        for rec in read():
            latest[id_key(rec.get("id"))] = number
    return latest


def merge_live(base: Iterable[dict[str, Any]], sources: list[RoundRecords]) -> Iterator[dict[str, Any]]:
    """The live records of a corpus (``base``) and its rounds (``sources``), wherever they are read from: each
    prompt's record from the latest round that answered it, else its base record."""
    latest = latest_rounds(sources)
    for rec in base:
        if id_key(rec.get("id")) not in latest:
            yield rec
    for number, read in sorted(sources, key=lambda s: s[0]):
        for rec in read():
            if latest.get(id_key(rec.get("id"))) == number:
                yield {**rec, "round": number}
