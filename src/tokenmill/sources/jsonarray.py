"""Stream the elements of a file holding one JSON array, without loading the whole file.

The file is decoded in 1 MiB chunks and each element is parsed on its own with the standard library's
``raw_decode``; only the current chunk and the element being parsed are held in memory. A row's source is
``path:line (item N)``: the line where the element starts and its 0-based position in the array (several
elements may share a line, and sources must be unique). A syntax error cannot be skipped (the reader could
not tell where the next element starts), so it raises an InputError even under ``on_bad_row: skip``.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import IO

from tokenmill.errors import InputError
from tokenmill.sources.rows import RawRow, RowReader, open_binary

_CHUNK_BYTES = 1 << 20
_WHITESPACE = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def read_json_array(path: Path, start: int) -> RowReader:
    """Rows of a JSON array file, one per element, from position ``start`` on."""
    with open_binary(path) as fh:
        text = _Text(fh, str(path))
        if text.peek() != "[":
            raise text.error("expected the file to start with '['")
        text.advance(1)
        pos = 0
        if text.peek() == "]":
            text.advance(1)
        else:
            while True:
                text.peek()  # skip whitespace, so the element's line is where it starts
                line = text.line
                value = text.value()
                if pos >= start:
                    yield RawRow(pos, f"{path}:{line} (item {pos})", value)
                pos += 1
                after = text.peek()
                text.advance(1)
                if after == "]":
                    break
                if after != ",":
                    raise text.error(f"expected ',' or ']' after element {pos} (found {after or 'end of file'!r})")
        if text.peek() is not None:
            raise text.error("unexpected content after the closing ']'")
    return pos


class _Text:
    """Decoded text of a file, refilled chunk by chunk, with the line number of the read position."""

    def __init__(self, fh: IO[bytes], name: str) -> None:
        self._fh = fh
        self._name = name
        self._utf8 = codecs.getincrementaldecoder("utf-8-sig")()  # drops a leading BOM
        self._buf = ""
        self._at = 0
        self._eof = False
        self.line = 1

    def error(self, what: str, at: int | None = None) -> InputError:
        line = self.line if at is None else self.line + self._buf.count("\n", self._at, at)
        return InputError(f"{self._name}:{line}: {what}; the file must hold one JSON array; fix the file")

    def advance(self, n: int) -> None:
        """Move the read position ``n`` characters on (never across a newline)."""
        self._at += n

    def peek(self) -> str | None:
        """The next non-whitespace character (not consumed), or None at the end of the file."""
        while True:
            match = _WHITESPACE.match(self._buf, self._at)
            end = match.end() if match else self._at
            self.line += self._buf.count("\n", self._at, end)
            self._at = end
            if self._at < len(self._buf):
                return self._buf[self._at]
            if not self._fill():
                return None

    def value(self) -> object:
        """Parse the JSON value at the read position, reading more of the file until it is complete."""
        size = _CHUNK_BYTES  # doubled on every retry, so a huge element is re-parsed O(log size) times
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._at)
            except json.JSONDecodeError as exc:
                if self._fill(size):
                    size *= 2
                    continue  # the element may just be cut by the chunk boundary
                raise self.error(f"not valid JSON ({exc.msg})", at=exc.pos) from None
            if end == len(self._buf) and self._fill(size):
                size *= 2
                continue  # a number at the chunk end ("12" of "125") may continue in the next chunk
            self.line += self._buf.count("\n", self._at, end)
            self._at = end
            return value

    def _fill(self, size: int = _CHUNK_BYTES) -> bool:
        """Append the next ``size`` bytes, dropping consumed text; False when the file has no more data."""
        if self._eof:
            return False
        chunk = self._fh.read(size)
        self._eof = not chunk
        try:
            more = self._utf8.decode(chunk, final=self._eof)
        except UnicodeDecodeError as exc:
            line = self.line + self._buf.count("\n", self._at) + chunk.count(b"\n", 0, exc.start)
            raise InputError(
                f"{self._name}:{line}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8"
            ) from None
        self._buf = self._buf[self._at :] + more
        self._at = 0
        return bool(chunk)
