"""What the file readers share: the raw row (a decoded record before mapping), opening, JSON lines."""

from __future__ import annotations

import gzip
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import orjson

from tokenmill.errors import InputError


@dataclass(slots=True)
class RawRow:
    """One input row: its position in its file, where it came from, and its decoded value.

    A row that could not be decoded (bad JSON, bad UTF-8) still counts as a row, so it keeps its place in
    the numbering; it carries ``error`` instead of a value.
    """

    pos: int  # 0-based position among the rows of its file (blank lines are not rows)
    source: str  # unique per row: "path:line", "path:line (item N)", "path:row N", "dataset[split]:index"
    value: object = None
    error: str | None = None


# A reader yields the rows at or after a start position and returns how many rows the file holds.
RowReader = Generator[RawRow, None, int]


def decode_json_line(line: bytes, pos: int, source: str) -> RawRow:
    """Decode one JSON-lines record; a bad record becomes a row with a precise ``error``."""
    try:
        return RawRow(pos, source, orjson.loads(line))
    except orjson.JSONDecodeError as exc:
        return RawRow(pos, source, error=json_error_reason(line, exc))


def json_error_reason(line: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why a line is not a JSON record: bad UTF-8 (with the byte and column) or the parser's message."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not valid UTF-8 (byte 0x{line[bad.start]:02x} at column {bad.start + 1})"
    column = min(exc.pos, len(line.rstrip(b"\r\n"))) + 1  # the line's own newline is not a column
    return f"not valid JSON ({exc.msg} at column {column})"


@contextmanager
def open_binary(path: Path) -> Iterator[IO[bytes]]:
    """Open a file for binary reading (gunzipping ``*.gz``); an open failure becomes an InputError."""
    try:
        # GzipFile reads like any binary file; typeshed just does not declare it an IO[bytes].
        fh = cast(IO[bytes], gzip.open(path, "rb")) if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot open {path}: {exc.strerror or exc}; check the path and its permissions") from exc
    with fh:
        yield fh
