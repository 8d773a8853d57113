"""The token export on every core: batches of records built into token rows by a pool of processes, written in
the order they were read.

The main process reads the corpus and applies the filters (the duplicate finder needs every record in order);
each worker (forked with the tokenizer loaded, before the first record is read and so before the reader of a
remote prefix starts its threads; or spawned and loading it once) turns a batch of records into its JSON lines and
counts, which the main process writes and adds up batch by batch, in reading order. One worker or
N, the lines are the same bytes and the counts the same numbers: each batch is built alone, with counts of its
own. At most ``IN_FLIGHT`` batches a worker are read ahead, so memory stays bounded whatever the corpus's size;
an export of fewer than two batches (as the corpus lists it) runs in the main process (no pool to start).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import chain, islice
from multiprocessing import get_context
from typing import Any

import orjson

from tokenmill.errors import OutputError
from tokenmill.export.rows import KeepFields, kept_fields
from tokenmill.export.tokens import LeftOut, TokenCounts, TokenOptions, TokenRows
from tokenmill.export.usage import UsageCheck

BATCH = 32  # records a task: big enough that the pickling is small beside the tokenizer's work
IN_FLIGHT = 3  # batches a worker queued at most (read ahead of the writer)


def cores() -> int:
    """The cores this process may run on (its CPU affinity), the default number of workers."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class TokenJob:
    """What every worker builds rows with (picklable: it is sent once to each)."""

    tokens: TokenOptions
    keep: KeepFields
    job_tokenizer: str | None = None  # the job's `tokenizer`, when --tokenizer is not given
    api: str | None = None  # the job's api (a plain-text prompt to a text API is tokenised as sent)


# one batch's result: its JSON lines, each record's reason to be left out (None: kept), and its counts
Done = tuple[bytes, list[str | None], TokenCounts]


class _Builder:
    """Token rows of batches: one :class:`TokenRows` (its tokenizer loaded once), fresh counts a batch."""

    def __init__(self, job: TokenJob) -> None:
        self.job = job
        self.rows = TokenRows(job.tokens, job.job_tokenizer, job.api)

    def warm(self) -> _Builder:
        """Load the tokenizer now, when the export has one (before the workers are forked: they share it)."""
        if self.rows.tokenizer:
            self.rows.templater("to build token rows")
        return self

    def build(self, batch: list[dict[str, Any]]) -> Done:
        self.rows.counts = fresh_counts(self.rows)
        lines: list[bytes] = []
        reasons: list[str | None] = []
        for rec in batch:
            try:
                rows = self.rows.rows(rec)
            except LeftOut as why:
                reasons.append(str(why))
                continue
            reasons.append(None)
            extra = kept_fields(rec, self.job.keep)
            for row in rows:
                full = {**row, **{k: v for k, v in extra.items() if k not in row}}
                lines.append(orjson.dumps(full, option=orjson.OPT_APPEND_NEWLINE))
        return b"".join(lines), reasons, self.rows.counts


def fresh_counts(rows: TokenRows) -> TokenCounts:
    """Empty counts whose usage check names ``rows``' tokenizer and share."""
    usage = rows.counts.usage
    return TokenCounts(usage=UsageCheck(tokenizer=usage.tokenizer, max_share=usage.max_share))


_WORKER: _Builder | None = None


def _start(job: TokenJob) -> None:
    global _WORKER
    _WORKER = _Builder(job).warm()


def start_method() -> str:
    """``fork`` when this process runs one thread (the workers then share the tokenizer already loaded: no start
    cost), else ``spawn`` (a fork beside other threads may inherit a lock one of them held)."""
    return "fork" if sys.platform == "linux" and threading.active_count() == 1 else "spawn"


def _build(batch: list[dict[str, Any]]) -> Done:
    assert _WORKER is not None, "the worker was not started"
    return _WORKER.build(batch)


def _batches(records: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    it = iter(records)
    while batch := list(islice(it, BATCH)):
        yield batch


def token_lines(
    records: Iterable[dict[str, Any]],
    job: TokenJob,
    workers: int,
    totals: TokenCounts,
    left_out: Callable[[str], None],
    expected: int | None = None,
) -> Iterator[bytes]:
    """The JSON lines of ``records``' token rows, in order, built by ``workers`` processes; each batch's counts are
    added to ``totals`` and each record that yields no row is told to ``left_out`` with its reason. ``expected``,
    the records the corpus lists (None: unknown), decides before anything is read whether a pool pays (two
    batches or more), so its workers are forked before the reader starts threads of its own."""
    batches = _batches(records)
    head: list[list[dict[str, Any]]] = []
    if expected is None:  # read two batches to know
        head = list(islice(batches, 2))
        pooled = len(head) >= 2
    else:
        pooled = expected >= 2 * BATCH
    totals.workers = workers if workers > 1 and pooled else 1
    if totals.workers == 1:
        builder = _Builder(job)
        totals.usage = fresh_counts(builder.rows).usage
        for batch in chain(head, batches):
            yield _take(builder.build(batch), totals, left_out)
        return
    yield from _pooled(chain(head, batches), job, workers, totals, left_out)


def _ready() -> None:
    """A task that does nothing: submitted first, it makes a fork pool start its workers (all at once)."""


def _pooled(
    batches: Iterable[list[dict[str, Any]]],
    job: TokenJob,
    workers: int,
    totals: TokenCounts,
    left_out: Callable[[str], None],
) -> Iterator[bytes]:
    global _WORKER
    method = start_method()
    if method == "fork":
        _WORKER = _Builder(job).warm()  # the workers are forked with it
        totals.usage = fresh_counts(_WORKER.rows).usage
        pool = ProcessPoolExecutor(workers, mp_context=get_context(method))
        pool.submit(_ready)  # the first task forks every worker, now: this process still runs one thread
    else:
        totals.usage = fresh_counts(TokenRows(job.tokens, job.job_tokenizer, job.api)).usage
        pool = ProcessPoolExecutor(workers, mp_context=get_context(method), initializer=_start, initargs=(job,))
    pending: deque[Future[Done]] = deque()
    try:
        for batch in batches:
            pending.append(pool.submit(_build, batch))
            if len(pending) >= workers * IN_FLIGHT:
                yield _take(_result(pending.popleft()), totals, left_out)
        while pending:
            yield _take(_result(pending.popleft()), totals, left_out)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _WORKER = None


def _result(future: Future[Done]) -> Done:
    try:
        return future.result()
    except BrokenProcessPool as exc:
        raise OutputError(
            f"a worker of the token export died ({exc}): the export is left as it was; run it again, with fewer "
            "--workers if the machine ran out of memory"
        ) from exc


def _take(done: Done, totals: TokenCounts, left_out: Callable[[str], None]) -> bytes:
    lines, reasons, counts = done
    totals.merge(counts)
    for reason in reasons:
        if reason is not None:
            left_out(reason)
    return lines
