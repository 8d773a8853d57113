"""Which partition of a split run owns a row: ``blake2b(id) mod N``, stable across runs and machines, so a
resume finds each id where it expects it, whatever N was before."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from tokenmill.records import Prompt, Skip


def partition_of(row_id: str, count: int) -> int:
    """The partition (0..count-1) that owns ``row_id``."""
    digest = hashlib.blake2b(row_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def only_partition(rows: Iterator[Prompt | Skip], index: int, count: int) -> Iterator[Prompt | Skip]:
    """The rows of partition ``index`` of ``count`` (skips go to partition 0)."""
    for row in rows:
        if isinstance(row, Skip):
            if index == 0:
                yield row
        elif partition_of(row.id, count) == index:
            yield row
