"""``offloaded.jsonl``: sealed shards deleted locally after a verified upload (``output.delete_after_upload``).

A shard is recorded here (and the record fsynced) before its file is deleted, and only once the remote
copy was read back with the same sha256 and the remote manifest lists it. Its manifest line stays, so a
resume still knows its ids and never reuses its name; ``verify`` counts it as offloaded rather than missing
(``verify --remote`` checks the remote copy).
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from tokenmill.output import layout
from tokenmill.output.fsio import AppendFile, output_error

_INDEX = re.compile(r"completions_(\d{6,})\.jsonl")


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
    log_file = AppendFile(root / layout.OFFLOADED)
    try:
        log_file.append(orjson.dumps({"shard": shard, "sha256": sha256, "remote": remote}) + b"\n")
        log_file.sync()
    finally:
        log_file.close()


def next_index(names: set[str]) -> int:
    """The shard index after the highest offloaded one (0 when none)."""
    return max((int(m.group(1)) for n in names if (m := _INDEX.fullmatch(n))), default=-1) + 1
