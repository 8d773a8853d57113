"""``count_rows``: how many rows ``iter_prompts`` will read, for progress displays (not on the hot path).

Parquet files are counted from their metadata, JSON lines by counting lines without decoding them, JSON
arrays by parsing them (slower, still streamed); a Hugging Face dataset from its split info when the
dataset has any. The count includes rows that will turn out bad, and honours ``offset``/``limit``.
"""

from __future__ import annotations

from tokenmill.config import InputSpec
from tokenmill.sources.files import resolve_files
from tokenmill.sources.hf import split_size
from tokenmill.sources.partition import Split
from tokenmill.sources.readers import row_count


def count_rows(spec: InputSpec, split: Split | None = None) -> int | None:
    """Rows in the ``offset``/``limit`` window, or None when the input does not say how many it has. For a
    partition (``split``): its own files' rows when split by files without a window, else the window's share."""
    if spec.hf is not None:
        total = split_size(spec.hf)
    else:
        assert spec.path is not None  # InputSpec guarantees exactly one of path and hf
        files = resolve_files(spec.path, spec.format)
        if split is not None and split.by == "files" and spec.offset == 0 and spec.limit is None:
            return sum(row_count(f, spec) for i, f in enumerate(files) if split.owns_file(i))
        total = sum(row_count(f, spec) for f in files)
    if total is None:
        return None
    window = max(0, total - spec.offset)
    window = window if spec.limit is None else min(window, spec.limit)
    return window if split is None else round(window / split.count)
