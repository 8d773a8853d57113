"""A machine crash, simulated after a kill: the tail of a file that was not yet durable is torn.

A SIGKILL leaves every byte the client wrote in the page cache, so the files look exactly as the process
left them. A power loss can do worse: whatever was written after the last fsync may be lost, cut anywhere,
or (on some filesystems) read back as zeros. Sealed shards are fsynced before they are renamed into place,
so only the append-only files can be torn this way; each variant is a state a real crash can leave:

=================  =========================================================================================
``open-shard``     the open shard's last line cut in the middle (it was never fsynced)
``zero-tail``      NUL bytes after the open shard's last line (delayed allocation after a power loss)
``manifest-tail``  the manifest's last line cut in the middle (a crash while it was appended)
``manifest-line``  the manifest's last line gone (a crash after a shard's rename, before its manifest line)
``failed-tail``    ``failed.jsonl``'s last line cut in the middle
=================  =========================================================================================

The next start must repair each one (and say so in its log); the run must still verify at the end.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from chaos.observe import FAILED, MANIFEST, OPEN, SEALED

VARIANTS = ("open-shard", "zero-tail", "manifest-tail", "manifest-line", "failed-tail")


def _open_shard(out: Path) -> Path | None:
    found = [p for p in out.iterdir() if OPEN.fullmatch(p.name)] if out.is_dir() else []
    return found[0] if len(found) == 1 else None


def _last_line(path: Path) -> tuple[int, int] | None:
    """(start, end) offsets of the last complete line, or None when there is none (or a torn tail already)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.endswith(b"\n") or len(data) < 3:
        return None
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    return start, len(data)


def _cut(path: Path, size: int) -> None:
    with path.open("r+b") as fh:
        fh.truncate(size)
        os.fsync(fh.fileno())


def tear(out: Path, variant: str, rng: random.Random) -> tuple[str, str] | None:
    """Tear one file of ``out`` as ``variant`` says: (what was done, the file's name), or None when there
    is nothing to tear."""
    target: Path | None
    if variant in ("open-shard", "zero-tail"):
        target = _open_shard(out)
    elif variant in ("manifest-tail", "manifest-line"):
        target = out / MANIFEST
    else:
        target = out / FAILED
    line = _last_line(target) if target is not None else None
    if target is None or line is None:
        return None
    start, end = line
    if variant == "zero-tail":
        with target.open("ab") as fh:
            fh.write(b"\0" * rng.randint(1, 4096))
            os.fsync(fh.fileno())
        return f"{target.name}: NUL bytes after its last line", target.name
    if variant == "manifest-line":
        _cut(target, start)
        return f"{target.name}: last line ({end - start} bytes) removed", target.name
    keep = rng.randint(start + 1, end - 2)  # strictly inside the line, its newline gone
    _cut(target, keep)
    return f"{target.name}: last line cut after {keep - start} of {end - start} bytes", target.name


@dataclass(slots=True)
class Tear:
    """One simulated crash tear, and the start that repaired it."""

    variant: str
    done: str
    file: str  # the file torn
    after_start: int  # torn after this start was killed
    repaired_by: int | None = None
    announced: bool = False  # the repairing start logged "output repaired"

    def healed(self, out: Path) -> bool:
        """Whether the damage is gone: no torn tail left, or the manifest lists every sealed shard again."""
        path = out / self.file
        if self.variant == "manifest-line":
            sealed = sum(1 for p in out.iterdir() if SEALED.fullmatch(p.name))
            return path.exists() and path.read_bytes().count(b"\n") == sealed
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return True  # the open shard was sealed (it was repaired first)
        return not data or data.endswith(b"\n")


def tear_any(out: Path, rng: random.Random, first: str, after_start: int) -> Tear | None:
    """Tear ``first`` if it can be, else another variant."""
    for variant in [first] + [v for v in VARIANTS if v != first]:
        torn = tear(out, variant, rng)
        if torn is not None:
            return Tear(variant, torn[0], torn[1], after_start)
    return None
