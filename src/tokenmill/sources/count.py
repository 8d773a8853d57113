"""``count_rows``: how many rows ``iter_prompts`` will read, for progress displays (not on the hot path).

Parquet files are counted from their metadata, JSON lines by counting lines without decoding them, JSON
arrays by parsing them (slower, still streamed); a Hugging Face dataset from its split info when the
dataset has any. The count includes rows that will turn out bad, and honours ``offset``/``limit``.
"""

from __future__ import annotations

import sys

from tokenmill.config import InputSpec
from tokenmill.sources.files import resolve_files
from tokenmill.sources.hf import split_size
from tokenmill.sources.readers import open_rows
from tokenmill.sources.rows import RowReader


def count_rows(spec: InputSpec) -> int | None:
    """Rows in the ``offset``/``limit`` window, or None when the input does not say how many it has."""
    if spec.hf is not None:
        total = split_size(spec.hf)
    else:
        assert spec.path is not None  # InputSpec guarantees exactly one of path and hf
        total = 0
        for file in resolve_files(spec.path, spec.format):
            total += _drain(open_rows(file, sys.maxsize, spec))
    if total is None:
        return None
    window = max(0, total - spec.offset)
    return window if spec.limit is None else min(window, spec.limit)


def _drain(reader: RowReader) -> int:
    """Run a reader that starts past its end (it yields nothing) and return its row count."""
    while True:
        try:
            next(reader)
        except StopIteration as end:
            return int(end.value)
