"""Rows of a Hugging Face dataset, streamed with ``datasets`` (nothing is downloaded up front).

``input.hf.dataset`` is a Hub id, or a local directory of data files (``*.jsonl``, ``*.parquet``, ...) that
``datasets`` reads with its packaged builders; a local directory works offline. Rows are numbered from 0 in
split order; the source of a row reads ``dataset[split]:index``. Every error ``datasets`` or the Hub raises
becomes an InputError that says how to go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

from tokenmill.config import HFInputSpec
from tokenmill.errors import InputError
from tokenmill.sources.rows import RawRow


def read_hf(hf: HFInputSpec, offset: int, limit: int | None) -> Iterator[tuple[int, RawRow]]:
    """(row index, row) for the rows ``offset`` to ``offset + limit`` of the split."""
    dataset = _load(hf)
    if offset:
        dataset = dataset.skip(offset)
    if limit is not None:
        dataset = dataset.take(limit)
    name = f"{hf.dataset}[{hf.split}]"
    rows = iter(dataset)
    for index in count(offset):
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as exc:  # datasets surfaces arrow, fsspec and network errors unwrapped
            raise InputError(
                f"{name}:{index}: the dataset cannot be read past this row ({type(exc).__name__}: {exc}); "
                "check the dataset files, or download it and give input.path"
            ) from exc
        yield index, RawRow(index - offset, f"{name}:{index}", row)


def split_size(hf: HFInputSpec) -> int | None:
    """Rows in the split according to the dataset's metadata, or None when it does not record them."""
    splits = _load(hf).info.splits
    if not splits or hf.split not in splits:
        return None
    size = splits[hf.split].num_examples
    return int(size) if size else None


def _load(hf: HFInputSpec) -> Any:
    try:
        import datasets
    except ImportError as exc:  # a core dependency, but a broken install should still read clearly
        raise InputError("input.hf needs the `datasets` package: pip install datasets") from exc
    try:
        return datasets.load_dataset(hf.dataset, hf.config, split=hf.split, streaming=True)
    except Exception as exc:  # unknown ids, no network, bad config or split: many unrelated types
        where = hf.dataset + (f" (config {hf.config!r})" if hf.config else "") + f", split {hf.split!r}"
        raise InputError(
            f"dataset {where} could not be loaded: {type(exc).__name__}: {exc}; "
            "check the id, config and split, or download it and give input.path"
        ) from exc
