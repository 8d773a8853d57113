"""``manifest.jsonl``: one line per sealed shard, an index derived from the shards (never a second truth).

A line holds the shard's name, record count, byte size, sha256, its ids in order and its token sums, so a
resume learns what is done without reading the shards, and ``verify`` can check every shard against it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tokenmill.output.fsio import atomic_write, output_error


@dataclass(slots=True)
class ManifestEntry:
    """The manifest line of one sealed shard."""

    shard: str
    count: int
    bytes: int
    sha256: str
    ids: list[str]
    prompt_tokens: int
    completion_tokens: int
    sealed_at: float

    def encode(self) -> builtins.bytes:
        """The JSONL line (with its newline)."""
        return orjson.dumps(
            {
                "shard": self.shard,
                "count": self.count,
                "bytes": self.bytes,
                "sha256": self.sha256,
                "ids": self.ids,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "sealed_at": self.sealed_at,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )


@dataclass(slots=True)
class ManifestRead:
    """The usable entries of a manifest (the last line wins per shard) and what was wrong with it."""

    entries: dict[str, ManifestEntry] = field(default_factory=dict)
    good_bytes: int = 0  # length of the prefix made of whole lines
    tail: int = 0  # bytes of a torn last line
    bad: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    duplicates: list[str] = field(default_factory=list)  # shards listed more than once
    exists: bool = True


def parse_line(line: bytes) -> ManifestEntry:
    """Decode one manifest line; ``ValueError`` says what is wrong with it."""
    obj = orjson.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    ids = obj.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("ids is not a list of strings")
    entry = ManifestEntry(
        shard=_typed(obj, "shard", str),
        count=_typed(obj, "count", int),
        bytes=_typed(obj, "bytes", int),
        sha256=_typed(obj, "sha256", str),
        ids=ids,
        prompt_tokens=_typed(obj, "prompt_tokens", int),
        completion_tokens=_typed(obj, "completion_tokens", int),
        sealed_at=float(_typed(obj, "sealed_at", (int, float))),
    )
    if entry.count != len(ids):
        raise ValueError(f"count {entry.count} but {len(ids)} ids")
    return entry


def read(path: Path) -> ManifestRead:
    """Read every line of ``path`` (a missing file is an empty manifest)."""
    result = ManifestRead()
    try:
        with path.open("rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.endswith(b"\n"):
                    result.tail = len(line)
                    break
                result.good_bytes += len(line)
                _take(result, lineno, line)
    except FileNotFoundError:
        result.exists = False
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    return result


def rewrite(path: Path, entries: Iterable[ManifestEntry]) -> None:
    """Atomically replace the manifest with ``entries`` (tmp file, fsync, rename, fsync the directory)."""
    atomic_write(path, b"".join(e.encode() for e in entries))


def _take(result: ManifestRead, lineno: int, line: bytes) -> None:
    try:
        entry = parse_line(line)
    except ValueError as exc:
        reason = "not valid JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
        result.bad.append((lineno, reason))
        return
    if entry.shard in result.entries:
        result.duplicates.append(entry.shard)
    result.entries[entry.shard] = entry


def _typed(obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{key} is missing or not a {getattr(kind, '__name__', 'number')}")
    return value
