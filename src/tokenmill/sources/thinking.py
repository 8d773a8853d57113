"""Which prompts are sent with thinking on: the row's own column (``input.thinking_field``) when it says, else the
job's ``thinking``: on, off, nothing (the model's default), or a share of the rows chosen by a hash of the row's
id, so a mixed job sends every row the same mode in every run, on every machine and in every partition.

The hash is salted (``blake2b(id, person="thinking")``), so the rows a share picks are independent of the rows a
split run gives each partition (``blake2b(id) mod N``). With ``samples: N`` the N answers of a row share its mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from tokenmill.config import ThinkingMode
from tokenmill.records import Prompt, Skip

_SALT = b"thinking"
_SPAN = float(1 << 64)
_WORDS = {"on": True, "off": False, "true": True, "false": False}


def share_point(row_id: str) -> float:
    """Where a row's id falls in [0, 1): rows below a share are sent with thinking on."""
    digest = hashlib.blake2b(row_id.encode("utf-8", "surrogatepass"), digest_size=8, person=_SALT).digest()
    return int.from_bytes(digest, "big") / _SPAN


def thinking_for(mode: ThinkingMode, row_id: str) -> bool | None:
    """The mode a row is sent with under the job's ``mode`` (None: nothing is sent)."""
    if mode is None:
        return None
    if mode == "on" or mode == "off":
        return mode == "on"
    return share_point(row_id) < mode


def row_thinking(value: Any, field: str) -> bool | None:
    """A row's ``thinking_field`` value as a mode (None: the row does not say); ValueError for anything else."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _WORDS:
        return _WORDS[value.strip().lower()]
    raise ValueError(f"thinking field {field!r} must be true/false (or on/off), got {value!r}")


def with_thinking(rows: Iterator[Prompt | Skip], mode: ThinkingMode) -> Iterator[Prompt | Skip]:
    """``rows`` with the job's mode set on every prompt whose row did not say (Skips pass as they are)."""
    if mode is None:
        yield from rows
        return
    for row in rows:
        if isinstance(row, Prompt) and row.thinking is None:
            row.thinking = thinking_for(mode, row.primary_id or row.id)
        yield row


def describe(mode: ThinkingMode, field: str | None) -> str | None:
    """The start line's word on the job's thinking mode (None when the job sends none)."""
    if mode is None and field is None:
        return None
    said = {None: "nothing sent (the model's default)", "on": "on", "off": "off"}
    job = said[mode] if mode is None or isinstance(mode, str) else f"on for {mode:.0%} of the rows (by id)"
    return f"thinking: {job}" + (f"; a row's {field!r} column wins" if field else "")
