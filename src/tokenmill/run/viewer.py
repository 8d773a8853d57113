"""The live page's sample viewer: recent answers with their quality flags, and the worst by each signal.

For a live run it reads the tail of the newest shards only (bounded work, at most every ``refresh_s``, in a
thread); ``tokenmill serve`` hands it the whole corpus once. Records are the shards' own lines; a torn last line
is not one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.output.layout import list_dir
from tokenmill.quality.corpus import Tally, excerpt

RECENT = 8  # recent answers shown
WORST = 3  # answers shown per signal
TAIL_BYTES = 2_000_000  # read of each of the newest shards, for a live run
TAIL_SHARDS = 2


def _example(rec: dict[str, Any], flags: list[str]) -> dict[str, Any]:
    text, where = excerpt(rec, flags)
    tokens = rec.get("completion_tokens")
    return {
        "id": str(rec.get("id")),
        "flags": flags,
        "finish_reason": rec.get("finish_reason"),
        "completion_tokens": tokens if isinstance(tokens, int) else None,
        "excerpt": text,
        "where": where,
    }


def sample_view(records: Iterable[dict[str, Any]], recent: int = RECENT, worst: int = WORST) -> dict[str, Any]:
    """The viewer's part of the page state: the last ``recent`` answers (newest first) and the ``worst`` of each
    signal (quality/corpus.py's ranking)."""
    tally = Tally("", worst)
    keep: deque[tuple[dict[str, Any], list[str]]] = deque(maxlen=recent)
    for rec in records:
        if rec.get("status", "ok") != "ok":
            continue
        q = tally.add(rec)
        keep.append((rec, list(q.get("flags") or [])))
    result = tally.finish()
    return {
        "recent": [_example(rec, flags) for rec, flags in reversed(keep)],
        "worst": {name: [e.as_dict() for e in examples] for name, examples in result.worst.items()},
    }


def _tail(path: Path, size: int) -> Iterator[dict[str, Any]]:
    """The whole, decodable records in the last ``size`` bytes of ``path``."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            end = fh.tell()
            fh.seek(max(0, end - size))
            data = fh.read()
    except OSError:
        return
    lines = data.split(b"\n")
    if end > size:
        lines = lines[1:]  # the first is cut by the seek
    for line in lines[:-1]:  # the last is empty, or torn
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            yield rec


def recent_records(
    out: Path, shards: int = TAIL_SHARDS, size: int = TAIL_BYTES, partition: int | None = None
) -> list[dict[str, Any]]:
    """The records at the end of the newest ``shards`` shard files of ``out``'s writer ``partition`` (the default
    writer's for None), oldest first."""
    try:
        one = list_dir(out, partition)
    except OutputError:  # the directory cannot be listed now: no sample this time
        return []
    names = {i: name for i, (name, _) in one.sealed.items()}
    names.update(one.open)
    paths = [out / names[i] for i in sorted(names)][-shards:]
    return [rec for path in paths for rec in _tail(path, size)]


class LiveSamples:
    """The viewer of a live run: recomputed from the newest shards when asked, at most every ``refresh_s``."""

    def __init__(
        self, out: Path, partition: int | None = None, refresh_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.out = out
        self.partition = partition
        self.refresh_s = refresh_s
        self.clock = clock
        self._view: dict[str, Any] = {"recent": [], "worst": {}}
        self._at: float | None = None

    async def get(self) -> dict[str, Any]:
        now = self.clock()
        if self._at is None or now - self._at >= self.refresh_s:
            self._at = now
            self._view = await asyncio.to_thread(
                lambda: sample_view(recent_records(self.out, partition=self.partition))
            )
        return self._view
