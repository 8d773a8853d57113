"""Which files a local ``input.path`` names, in a stable order, and the format of each.

A path is a file, a directory (searched recursively for data files) or a glob (``**`` allowed). Files are
sorted by their path string, so row indexes, and the ids derived from them, are the same on every run;
name numbered parts with zero padding (``part-00002`` before ``part-00010``).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Literal

from tokenmill.errors import InputError

FileFormat = Literal["jsonl", "json", "parquet"]

# Longest suffixes first so ".jsonl.gz" wins over ".gz".
_SUFFIXES: tuple[tuple[str, FileFormat], ...] = (
    (".jsonl.gz", "jsonl"),
    (".ndjson.gz", "jsonl"),
    (".json.gz", "json"),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".json", "json"),
    (".parquet", "parquet"),
    (".pq", "parquet"),
)
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class InputFile:
    """One file to read and the reader it needs."""

    path: Path  # as listed (not resolved), so row sources read like input.path
    format: FileFormat


def format_of(path: Path) -> FileFormat | None:
    """The format a file name implies, or None when its suffix is not one tokenmill reads."""
    name = path.name.lower()
    for suffix, fmt in _SUFFIXES:
        if name.endswith(suffix):
            return fmt
    return None


def resolve_files(path: str, fmt: Literal["auto", "jsonl", "json", "parquet"]) -> list[InputFile]:
    """The files ``path`` names, sorted; raises InputError when there are none or one cannot be typed."""
    if "://" in path:
        raise InputError(
            f"input.path {path!r} is a URL; tokenmill reads local files only: copy the data to a local disk, "
            "or use input.hf for a Hugging Face dataset"
        )
    path = os.path.expanduser(path)
    if os.path.isfile(path):  # a literal name wins, even one with glob characters in it
        found = [Path(path)]
    elif os.path.isdir(path):
        found = [p for p in _walk(Path(path)) if _wanted_in_dir(p, fmt)]
        if not found:
            kinds = ", ".join(s for s, f in _SUFFIXES if fmt in ("auto", f))
            raise InputError(f"directory {path!r} holds no data files ({kinds}); check input.path")
    elif _GLOB_CHARS.intersection(path):
        found = [Path(p) for p in glob.glob(path, recursive=True) if os.path.isfile(p)]
        if not found:
            raise InputError(
                f"input.path {path!r} matches no files; check the pattern "
                f"(relative patterns are expanded from {os.getcwd()})"
            )
    else:
        raise InputError(
            f"input.path {path!r} does not exist; check the path (relative paths are resolved from {os.getcwd()})"
        )
    found.sort(key=str)
    return [InputFile(p, _format_for(p, fmt)) for p in found]


def _walk(root: Path) -> list[Path]:
    """Every file under ``root``, skipping hidden and ``_``-prefixed entries (``.cache``, ``_SUCCESS``)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
        out.extend(Path(dirpath, f) for f in filenames if not f.startswith((".", "_")))
    return out


def _wanted_in_dir(path: Path, fmt: str) -> bool:
    found = format_of(path)
    return found is not None and fmt in ("auto", found)


def _format_for(path: Path, fmt: Literal["auto", "jsonl", "json", "parquet"]) -> FileFormat:
    if fmt != "auto":
        return fmt
    found = format_of(path)
    if found is None:
        known = ", ".join(s for s, _ in _SUFFIXES)
        raise InputError(
            f"cannot tell the format of {str(path)!r} from its name (known: {known}); rename it or set input.format"
        )
    return found


def sample_dataset_path() -> Path:
    """The bundled ShareGPT-style sample dataset (about 3,000 rows), for demos and trial runs."""
    resource = files("tokenmill") / "data" / "sample_sharegpt.jsonl"
    path = Path(str(resource))
    if not path.is_file():
        raise InputError(f"the bundled sample dataset is missing at {path}; reinstall tokenmill")
    return path
