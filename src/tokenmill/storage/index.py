"""Index segments: the ids of uploaded shards, kept at the prefix so the done set is rebuilt without the shards.

A segment holds the local manifest lines (ids included) of uploaded shards: a JSON-lines object under
``_tokenmill/ids/`` named by its sha256 (see :func:`~tokenmill.storage.prefix.index_name`), written once with a
put-if-absent, never replaced, so a segment a killed writer left behind is harmless (no manifest lists it) and
writing it again is a no-op. A writer's manifest lists its segments in order; a writer that has listed many of
them folds them into one (:data:`FOLD_AT`).

The index is a shortcut, never a second truth: :mod:`tokenmill.storage.readback` takes an entry only when it
agrees with the manifest (count, bytes, sha256) and the object's size, and reads the shard itself otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenmill.output.manifest import ManifestEntry, parse_line

FOLD_AT = 64  # segments a manifest lists before its writer folds them into one


def encode(lines: Iterable[bytes]) -> bytes:
    """A segment holding these manifest lines (each ends with its newline)."""
    return b"".join(lines)


def decode(data: bytes) -> dict[str, ManifestEntry]:
    """Shard name -> entry for every readable line of a segment (an unreadable line is left out: its shard is
    then read from its object)."""
    out: dict[str, ManifestEntry] = {}
    for line in data.splitlines():
        try:
            entry = parse_line(line)
        except ValueError:
            continue
        out[entry.shard] = entry
    return out
