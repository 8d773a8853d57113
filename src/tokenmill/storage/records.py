"""The completion records under a job's remote prefix, read back shard object by shard object (``inspect`` and
``report`` from any machine), and the prefixes of its regeneration rounds.

Shards are read in writer order (the default writer, then each partition) and index order, one object in memory
at a time; a line that does not decode names the object and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from tokenmill.errors import StoreError
from tokenmill.storage.prefix import DIR, shard_of
from tokenmill.storage.store import Store

ROUNDS = f"{DIR}/regenerate/"
_ROUND = re.compile(rf"{re.escape(ROUNDS)}round-(\d{{3,}})/")


def shard_names(listing: dict[str, int]) -> list[str]:
    """The shard objects of a listing, default writer first, each writer's in index order."""
    keyed = []
    for name in listing:
        key = shard_of(name)
        if key is not None:
            writer, index = key
            keyed.append(((-1 if writer is None else writer, index), name))
    return [name for _, name in sorted(keyed)]


def iter_remote_records(store: Store, listing: dict[str, int] | None = None) -> Iterator[dict[str, Any]]:
    """Every completion record in the shard objects at ``store``'s prefix."""
    for name in shard_names(store.list() if listing is None else listing):
        got = store.read(name)
        if got is None:  # listed, then gone (another process's repair): nothing to read
            continue
        for lineno, line in enumerate(got.data.splitlines(), 1):
            if not line:
                continue
            try:
                obj = orjson.loads(line)
            except ValueError as exc:
                raise StoreError(f"{store.where(name)} line {lineno} is not valid JSON ({exc})") from exc
            if isinstance(obj, dict):
                yield obj


def round_prefixes(store: Store, listing: dict[str, int] | None = None) -> dict[int, str]:
    """Round number -> the URL of that regeneration round's own prefix (under the job's ``_tokenmill/``)."""
    out: dict[int, str] = {}
    for name in store.list() if listing is None else listing:
        m = _ROUND.match(name)
        if m:
            out[int(m.group(1))] = store.url + m.group(0)
    return dict(sorted(out.items()))
