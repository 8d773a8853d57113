"""Which partition of a split run owns a row: by whole input files, or by ``blake2b(id) mod N``.

The two ways (``partitioning.by``; see :class:`~tokenmill.config.PartitionSpec`):

- **ids**: ``blake2b(id) mod N``, stable across runs and machines, so a resume finds each id where it expects it
  whatever N was before; every partition reads every row of the input and keeps its own;
- **files**: whole input files, file i of the input's sorted list to partition ``i mod N``; a partition reads
  only its own files (another's is not opened at all, or only counted when the ids are row indices or an
  offset/limit window is set). Ids must then be unique across files: a repeat in another partition's file is
  not seen at input time (``verify`` and the remote read-back report it).

Either way the split is disjoint and deterministic for a given input and N, and every writer's done set holds
what every partition recorded, so a rerun with another N or another way is safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from tokenmill.config import InputSpec, PartitionSpec
from tokenmill.errors import ConfigError
from tokenmill.records import Prompt, Skip
from tokenmill.sources.files import resolve_files


def partition_of(row_id: str, count: int) -> int:
    """The partition (0..count-1) that owns ``row_id`` when splitting by ids."""
    digest = hashlib.blake2b(row_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True, slots=True)
class Split:
    """Partition ``index`` of ``count``, split ``by`` ids or whole files."""

    index: int
    count: int
    by: Literal["ids", "files"] = "ids"

    def owns_file(self, position: int) -> bool:
        """Whether the file at ``position`` of the input's sorted files is this partition's (by files)."""
        return position % self.count == self.index

    def describe(self) -> str:
        how = "whole input files" if self.by == "files" else "blake2b(id) mod N"
        return f"partition {self.index} of {self.count} ({how})"


def choose_split(spec: InputSpec, how: PartitionSpec, index: int, count: int) -> Split:
    """The split of partition ``index`` of ``count`` for this input (``auto`` looks at how many files there are)."""
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"partition {index} of {count} does not exist: the index goes from 0 to {count - 1}")
    if spec.hf is not None or how.by == "ids":
        if how.by == "files":
            raise ConfigError("a Hugging Face dataset is one stream: split it by ids (partitioning.by: ids)")
        return Split(index, count, "ids")
    if how.by == "files":
        return Split(index, count, "files")
    assert spec.path is not None
    files = len(resolve_files(spec.path, spec.format))
    return Split(index, count, "files" if files >= how.min_files_per_partition * count else "ids")


def only_partition(rows: Iterator[Prompt | Skip], index: int, count: int) -> Iterator[Prompt | Skip]:
    """The rows of partition ``index`` of ``count`` by ids (skips go to partition 0)."""
    for row in rows:
        if isinstance(row, Skip):
            if index == 0:
                yield row
        elif partition_of(row.id, count) == index:
            yield row


# Where a scheduler puts the task's index: Slurm array tasks, Kubernetes indexed jobs.
SCHEDULERS = {"slurm": "SLURM_ARRAY_TASK_ID", "k8s": "JOB_COMPLETION_INDEX"}


def parse_partition(text: str, environ: Mapping[str, str]) -> tuple[int, int]:
    """(index, count) from ``--partition``: ``I/N``; ``slurm/N`` or ``slurm`` (the index from
    ``SLURM_ARRAY_TASK_ID`` minus ``SLURM_ARRAY_TASK_MIN``, the count from ``SLURM_ARRAY_TASK_COUNT`` when not
    given); ``k8s/N`` (the index from ``JOB_COMPLETION_INDEX``)."""
    where, _, count_text = text.strip().partition("/")
    where = where.strip().lower()
    if where in SCHEDULERS:
        var = SCHEDULERS[where]
        raw = environ.get(var)
        if raw is None:
            raise ConfigError(f"--partition {text}: {var} is not set; run it as a {where} task, or give I/N")
        index = _number(raw, var)
        if where == "slurm":
            index -= _number(environ.get("SLURM_ARRAY_TASK_MIN", "0"), "SLURM_ARRAY_TASK_MIN")
        if not count_text and where == "slurm" and "SLURM_ARRAY_TASK_COUNT" in environ:
            count_text = environ["SLURM_ARRAY_TASK_COUNT"]
    else:
        index = _number(where, "the index")
    if not count_text:
        raise ConfigError(f"--partition {text}: give the number of partitions too, e.g. --partition {where}/8")
    count = _number(count_text, "the number of partitions")
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"--partition {text}: partition {index} of {count} does not exist (0 to {count - 1})")
    return index, count


def _number(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"{what} must be a whole number, not {text!r} (--partition I/N, slurm/N or k8s/N)") from None
