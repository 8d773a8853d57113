"""The prompt feed: reads the input in a thread, drops ids already done, and hands batches to the loop.

Reading (file I/O, JSON decoding, a dataset stream) happens off the event loop; the dispatcher pulls from
:class:`PromptFeed` as an async iterator. Skipped rows travel the same way so the loop writes them in order.
A bounded number of batches is in flight, so memory does not grow with the dataset.

The feed also counts the rows with several user turns as they are read (the mapper marks them), for the summary,
and hands every row to the :class:`~tokenmill.run.skips.SkipGuard`: when too many are skipped the rows before the
one that tipped it are still handed out (their skips recorded), then ``on_limit`` gets the error (the runner's
dispatcher stops, letting requests in flight finish); without ``on_limit`` the error is raised.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from tokenmill.records import Prompt, Skip
from tokenmill.run.skips import SkipGuard, TooManySkips
from tokenmill.sources.mapping import USER_TURNS

BATCH = 256
MAX_BATCHES = 8


@dataclass(slots=True)
class FeedCounts:
    """What the feed has seen so far (rows read, rows already done, rows skipped, rows sent, rows with several
    user turns)."""

    rows: int = 0
    multi_turn: int = 0
    already_done: int = 0
    skipped: int = 0
    sent: int = 0
    exhausted: bool = False


class PromptFeed:
    """Async iterator of prompts not yet done; ``on_skip`` is called on the loop for each skipped row."""

    def __init__(
        self,
        rows: Callable[[], Iterator[Prompt | Skip]],
        done: set[str],
        on_skip: Callable[[Skip], None],
        guard: SkipGuard | None = None,
    ) -> None:
        self._rows = rows
        self.guard = guard
        self.on_limit: Callable[[BaseException], None] | None = None  # too many skips: set by the runner
        self._done = done
        self._on_skip = on_skip
        self.counts = FeedCounts()
        self._queue: asyncio.Queue[list[Prompt | Skip] | BaseException | None] | None = None
        self._slots = threading.Semaphore(MAX_BATCHES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._batch: list[Prompt | Skip] = []
        self._pos = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[Prompt | Skip] | BaseException | None] = asyncio.Queue()
        self._queue = queue

        def put(item: list[Prompt | Skip] | BaseException | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            batch: list[Prompt | Skip] = []
            try:
                for row in self._rows():
                    if self._stop.is_set():
                        return
                    self.counts.rows += 1
                    tipped = self.guard.see(row) if self.guard is not None else None
                    if tipped is not None:
                        batch.append(row)
                        self._slots.acquire()
                        put(batch)
                        put(tipped)
                        return
                    if isinstance(row, Prompt) and row.meta is not None and USER_TURNS in row.meta:
                        self.counts.multi_turn += 1
                    if isinstance(row, Prompt) and row.id in self._done:
                        self.counts.already_done += 1
                        continue
                    batch.append(row)
                    if len(batch) >= BATCH:
                        self._slots.acquire()
                        put(batch)
                        batch = []
                if batch:
                    self._slots.acquire()
                    put(batch)
                put(None)
            except BaseException as exc:  # delivered to the loop, raised there
                put(exc)

        self._thread = threading.Thread(target=work, name="tokenmill-feed", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Ask the reader thread to stop (it exits at its next row)."""
        self._stop.set()
        for _ in range(MAX_BATCHES):
            self._slots.release()

    def __aiter__(self) -> AsyncIterator[Prompt]:
        return self

    async def __anext__(self) -> Prompt:
        while True:
            if self._pos < len(self._batch):
                row = self._batch[self._pos]
                self._pos += 1
                if isinstance(row, Skip):
                    self.counts.skipped += 1
                    self._on_skip(row)  # the output records each skipped source once
                    continue
                self.counts.sent += 1
                return row
            if self._queue is None:
                self.start()
            assert self._queue is not None
            item = await self._queue.get()
            if item is None:
                self.counts.exhausted = True
                raise StopAsyncIteration
            if isinstance(item, TooManySkips) and self.on_limit is not None:
                self.on_limit(item)
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                raise item
            self._slots.release()
            self._batch, self._pos = item, 0
