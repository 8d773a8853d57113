"""Looking at the output directory between two client starts, without changing it.

After every stop (kill or exit) the harness checks what must hold at *every* moment, not only at the end:
no id is recorded twice (completions, open shard included, and failures), and a sealed shard never changes
once it is sealed (its sha256 when first seen is its sha256 for ever). A killed writer may leave a torn last
line in its open shard or in ``failed.jsonl``; the next start cuts it, so it is not a record here.

After a machine loss (the directory deleted) a fresh start takes the records over from the remote prefix: the
shards it lists in ``offloaded.jsonl`` live at the remote only, and their records count as the directory's
(read from the store through ``fetch``); what the lost directory held locally is forgotten.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

SEALED = re.compile(r"completions_\d{6,}\.jsonl")
OPEN = re.compile(r"completions_\d{6,}\.jsonl\.open")
FAILED = "failed.jsonl"
MANIFEST = "manifest.jsonl"
OFFLOADED = "offloaded.jsonl"

Fetch = Callable[[str], bytes | None]  # a shard object's content at the remote prefix (None: not there)


def _whole_lines(data: bytes) -> list[bytes]:
    """The complete lines of ``data`` (a torn last line is left out)."""
    end = data.rfind(b"\n")
    return [line for line in data[: end + 1].splitlines() if line] if end >= 0 else []


def record_files(out: Path) -> list[Path]:
    """Every file holding records: sealed and open shards, and ``failed.jsonl``."""
    if not out.is_dir():
        return []
    found = [p for p in out.iterdir() if SEALED.fullmatch(p.name) or OPEN.fullmatch(p.name)]
    failed = out / FAILED
    return sorted(found) + ([failed] if failed.exists() else [])


def offloaded(out: Path) -> set[str]:
    """The shards that live at the remote only (taken over after a machine loss), per ``offloaded.jsonl``."""
    try:
        data = (out / OFFLOADED).read_bytes()
    except OSError:
        return set()
    names = set()
    for line in _whole_lines(data):
        try:
            names.add(str(orjson.loads(line)["shard"]))
        except (ValueError, KeyError, TypeError):
            continue
    return names


def offloaded_count(out: Path) -> int:
    """Completions in the shards that live at the remote only (their manifest lines' counts)."""
    names = offloaded(out)
    if not names:
        return 0
    try:
        data = (out / MANIFEST).read_bytes()
    except OSError:
        return 0
    total = 0
    for line in _whole_lines(data):
        try:
            entry = orjson.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("shard") in names:
            total += int(entry.get("count") or 0)
    return total


def count_records(out: Path) -> int:
    """Completions and failures recorded so far (whole lines; shards at the remote only by their manifest line)."""
    total = offloaded_count(out)
    for path in record_files(out):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # sealed (renamed) while we looked: counted under its new name next time
            continue
        end = data.rfind(b"\n")
        total += data[: end + 1].count(b"\n") if end >= 0 else 0
    return total


def manifest_size(out: Path) -> int:
    """Size of the manifest (it grows by one line per sealed shard): a cheap way to see a seal happen."""
    try:
        return (out / MANIFEST).stat().st_size
    except OSError:
        return 0


@dataclass(slots=True)
class Invariants:
    """What was seen of the output so far, and every violation found."""

    sealed: dict[str, str] = field(default_factory=dict)  # shard name -> sha256 when first seen
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    fetch: Fetch | None = None  # reads a shard at the remote prefix (for shards taken over)

    def lose_machine(self) -> None:
        """The directory is gone: what it held locally is forgotten (the remote prefix keeps what was up)."""
        self.sealed.clear()

    def check(self, out: Path, when: str) -> None:
        """Check the output now (call it only while no client runs)."""
        self.checks += 1
        ids: Counter[str] = Counter()
        local = {p.name for p in record_files(out)}
        fetch = self.fetch
        taken = ((name, fetch(name)) for name in sorted(offloaded(out) - local)) if fetch is not None else ()
        for name, data in taken:
            if data is None:
                self.violations.append(f"{when}: {name} is taken over from the remote, but not there")
                continue
            for line in _whole_lines(data):
                ids[str(orjson.loads(line)["id"])] += 1
        for path in record_files(out):
            data = path.read_bytes()
            if SEALED.fullmatch(path.name):
                digest = hashlib.sha256(data).hexdigest()
                first = self.sealed.setdefault(path.name, digest)
                if first != digest:
                    self.violations.append(f"{when}: sealed shard {path.name} changed after it was sealed")
                    self.sealed[path.name] = digest
            for line in _whole_lines(data):
                try:
                    ids[str(orjson.loads(line)["id"])] += 1
                except (ValueError, KeyError, TypeError):
                    self.violations.append(f"{when}: {path.name} holds a line that is not a record: {line[:80]!r}")
        for gone in sorted(set(self.sealed) - {p.name for p in record_files(out)}):
            self.violations.append(f"{when}: sealed shard {gone} disappeared")
            del self.sealed[gone]
        twice = sorted(i for i, n in ids.items() if n > 1)
        if twice:
            self.violations.append(f"{when}: {len(twice)} id(s) recorded more than once, e.g. {twice[:3]}")
