"""Read one JSONL file of the output directory line by line: ids, token sums, checksum, damage.

A line counts only once its newline is on disk; bytes after the last newline are a *torn* last line (a
write cut short by a crash or a full disk). A newline-terminated line that does not decode to the expected
record is *bad*: that is not crash damage, and the callers report it instead of repairing it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tokenmill import records
from tokenmill.errors import OutputError
from tokenmill.output.fsio import output_error
from tokenmill.records.read import id_key, record_id

Kind = Literal["ok", "failed", "skipped"]

_BAD_KEPT = 20  # bad lines remembered per file (the total is always counted)


@dataclass(slots=True)
class Scan:
    """What one pass over a file found."""

    path: Path
    kind: Kind
    records: int = 0
    good_bytes: int = 0  # length of the prefix made of whole lines
    tail: int = 0  # bytes after the last newline
    ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # skipped rows only
    prompt_tokens: int = 0
    completion_tokens: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason), first few
    bad_total: int = 0
    prefix_sha: Any = field(default_factory=hashlib.sha256)  # sha256 of the whole-line prefix
    file_sha256: str = ""  # hex sha256 of the whole file, tail included

    @property
    def size(self) -> int:
        """Bytes in the file when it was read."""
        return self.good_bytes + self.tail

    def first_bad(self) -> str:
        """``file:line: reason`` for the first bad line (for error messages)."""
        line, reason = self.bad[0]
        return f"{self.path} line {line}: {reason}"


def scan(path: Path, kind: Kind) -> Scan:
    """Read ``path`` once, checking every line is a ``kind`` record."""
    result = Scan(path=path, kind=kind)
    try:
        with path.open("rb") as fh:
            _scan_lines(result, fh)
    except FileNotFoundError:
        return result
    except OSError as exc:
        raise output_error(exc, "reading", path) from exc
    return result


def scan_bytes(data: bytes, kind: Kind, name: str) -> Scan:
    """The same pass over the content of a file held in memory (a remote object); ``name`` says where it is."""
    result = Scan(path=Path(name), kind=kind)
    _scan_lines(result, data.splitlines(keepends=True))
    return result


def _scan_lines(result: Scan, lines: Iterable[bytes]) -> None:
    for lineno, line in enumerate(lines, start=1):
        if not line.endswith(b"\n"):
            result.tail = len(line)
            tail_sha = result.prefix_sha.copy()
            tail_sha.update(line)
            result.file_sha256 = tail_sha.hexdigest()
            return
        result.prefix_sha.update(line)
        result.good_bytes += len(line)
        _take(result, lineno, line)
    result.file_sha256 = result.prefix_sha.hexdigest()


def require_clean(result: Scan, what: str) -> None:
    """Raise unless every whole line of ``result`` is a valid record (``what`` says how to recover)."""
    if result.bad_total:
        more = f" (and {result.bad_total - 1} more bad lines)" if result.bad_total > 1 else ""
        raise OutputError(
            f"{result.first_bad()}{more}; this is not crash damage, so it is not repaired automatically: {what}"
        )


def _take(result: Scan, lineno: int, line: bytes) -> None:
    try:
        obj = records.decode(line)
    except orjson.JSONDecodeError:
        reason: str | None = "not valid JSON"
    except ValueError as exc:
        reason = str(exc)
    else:
        reason = _collect(result, obj)
    if reason is None:
        result.records += 1
        return
    result.bad_total += 1
    if len(result.bad) < _BAD_KEPT:
        result.bad.append((lineno, reason))


def _collect(result: Scan, obj: dict[str, Any]) -> str | None:
    """Add the record's id (and tokens or source) to ``result``; a reason string when it is unusable."""
    status = obj.get("status")
    if status != result.kind:
        return f"status is {status!r}, expected {result.kind!r}"
    rid = record_id(obj.get("id"))
    if result.kind == "skipped":
        source = obj.get("source")
        if not isinstance(source, str):
            return "skip record without a source"
        result.sources.append(source)
        if rid is not None:
            result.ids.append(id_key(rid))
        return None
    if rid is None:
        return "record without a string or integer id"
    result.ids.append(id_key(rid))  # the canonical key: an integer id and its decimal string are one prompt
    if result.kind == "ok":
        result.prompt_tokens += _int(obj.get("prompt_tokens"))
        result.completion_tokens += _int(obj.get("completion_tokens"))
    return None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
