"""``offloaded.jsonl``: sealed shards that live at the remote only (offloaded after upload, or taken over).

Shards are recorded here when they are deleted locally after a verified upload (``output.delete_after_upload``),
or taken over from the remote copy into an empty output directory (:mod:`tokenmill.output.takeover`).

A shard is recorded here (and the record fsynced) before its file is deleted, and only once the remote
copy was read back with the same sha256 and the remote manifest lists it. Its manifest line stays, so a
resume still knows its ids and never reuses its name; ``verify`` counts it as offloaded rather than missing
(``verify --remote`` checks the remote copy). Shards of every writer (partitions too) are recorded here.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from tokenmill.output import layout
from tokenmill.output.fsio import AppendFile, output_error

_INDEX = re.compile(r"completions_(?:p(\d{3,})_)?(\d{6,})\.jsonl")


def read(root: Path) -> set[str]:
    """The names of the shards recorded as offloaded (a torn last line is ignored)."""
    path = root / layout.OFFLOADED
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    names: set[str] = set()
    for line in data.split(b"\n"):
        try:
            obj = orjson.loads(line)
        except ValueError:
            continue
        name = obj.get("shard") if isinstance(obj, dict) else None
        if isinstance(name, str) and _INDEX.fullmatch(name):
            names.add(name)
    return names


def record(root: Path, shard: str, sha256: str, remote: str) -> None:
    """Durably note that ``shard`` (with ``sha256``) lives at ``remote`` only, before deleting it."""
    record_many(root, [(shard, sha256, remote)])


def record_many(root: Path, shards: list[tuple[str, str, str]]) -> None:
    """Durably note several (shard, sha256, remote) at once (one fsync)."""
    log_file = AppendFile(root / layout.OFFLOADED)
    try:
        for shard, sha256, remote in shards:
            log_file.append(orjson.dumps({"shard": shard, "sha256": sha256, "remote": remote}) + b"\n")
        log_file.sync()
    finally:
        log_file.close()


def of_writer(names: set[str], partition: int | None) -> set[str]:
    """The offloaded shards of one writer (the default one, or ``partition``)."""
    out = set()
    for n in names:
        m = _INDEX.fullmatch(n)
        if m is not None and (None if m.group(1) is None else int(m.group(1))) == partition:
            out.add(n)
    return out


def next_index(names: set[str]) -> int:
    """The shard index after the highest offloaded one (0 when none); give one writer's names."""
    return max((int(m.group(2)) for n in names if (m := _INDEX.fullmatch(n))), default=-1) + 1
