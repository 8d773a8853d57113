"""Read the completion records of an output directory in shard order (sealed shards, then the open one).

Only whole lines count: a torn last line of the open shard (a write cut short) is not a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.output.layout import FAILED, Names, list_dir


def shard_paths(root: Path) -> list[Path]:
    """Every shard file, sealed and open, in index order: the default writer's, then each partition's."""
    listing = list_dir(root)
    paths: list[Path] = []
    for part in [None, *sorted(listing.partitions)]:
        one = listing if part is None else list_dir(root, part)
        names = {i: name for i, (name, _) in one.sealed.items()}
        names.update(one.open)
        paths += [root / names[i] for i in sorted(names)]
    return paths


def _lines(path: Path) -> Iterator[bytes]:
    """The whole lines of ``path`` (a torn last line, a write cut short, is not one)."""
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.endswith(b"\n"):
                    yield line
    except OSError as exc:
        raise OutputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def iter_jsonl(lines: Iterable[bytes], where: str) -> Iterator[dict[str, Any]]:
    """The records of whole JSONL ``lines`` (blank ones skipped): a line that is not a JSON object is an
    :class:`OutputError` naming ``where`` (a file or an object) and the line."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except ValueError as exc:
            raise OutputError(f"{where}:{lineno} is not valid JSON ({exc}); run `tokenmill verify`") from exc
        if not isinstance(obj, dict):
            raise OutputError(f"{where}:{lineno} is not a record; run `tokenmill verify`")
        yield obj


def iter_file(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one JSONL file of the output (whole lines only; none when it does not exist)."""
    if path.exists():
        yield from iter_jsonl(_lines(path), str(path))


def iter_records(root: Path, failed: bool = False) -> Iterator[dict[str, Any]]:
    """Completion records (or, with ``failed``, the records of failed.jsonl and of each partition's failed
    file); a bad line names file and line."""
    parts = sorted(list_dir(root).partitions) if failed else []
    paths = [root / FAILED, *(root / Names(p).failed for p in parts)] if failed else shard_paths(root)
    for path in paths:
        if not path.exists():
            sealed = path.with_name(path.name.removesuffix(".open"))
            if path.name.endswith(".open") and sealed.exists():  # sealed since the listing (a run in progress)
                path = sealed
            else:
                continue
        yield from iter_file(path)
