"""A running job's background: the housekeeping loop (flush the output, follow the concurrency controller and the
upload backlog, count the input, tick the display and the monitor), the servers-file follower, and the signal
handlers (the first SIGINT/SIGTERM stops taking prompts, the second cancels the dispatch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from tokenmill.config import JobSpec
from tokenmill.errors import OutputError
from tokenmill.fleet.endpoints import follow
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.output import OutputDir
from tokenmill.run.backlog import Backlog
from tokenmill.run.control import ConcurrencyController
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.feed import PromptFeed
from tokenmill.run.progress import Display, Tracker
from tokenmill.run.runstate import RunState
from tokenmill.run.watch import RunMonitor
from tokenmill.sources import count_rows
from tokenmill.sources.partition import Split

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5
TICK_INTERVAL_S = 1.0


class Housekeeping:
    """Every ``FLUSH_INTERVAL_S``: flush the output, follow the concurrency controller, count the input; every
    ``TICK_INTERVAL_S``: a display tick, handed to the monitor and to ``on_tick``."""

    def __init__(
        self,
        run: RunState,
        out: OutputDir,
        feed: PromptFeed,
        dispatcher: Dispatcher,
        controller: ConcurrencyController | None,
        monitor: RunMonitor,
        tracker: Tracker,
        display: Display,
        on_tick: Callable[[Snapshot], None] | None,
    ) -> None:
        self.run, self.out, self.feed, self.dispatcher = run, out, feed, dispatcher
        self.controller, self.monitor, self.tracker, self.display = controller, monitor, tracker, display
        self.on_tick = on_tick
        self.backlog: Backlog | None = None  # output.upload.max_backlog: pauses generation past it

    def sync_counts(self) -> None:
        """What the feed knows of the input, for the progress displays."""
        counts = self.feed.counts
        self.tracker.skipped = counts.skipped
        self.tracker.rows_read, self.tracker.multi_turn = counts.rows, counts.multi_turn
        if counts.exhausted:
            self.tracker.total = counts.rows

    async def loop(self) -> None:
        job = self.run.job
        total = asyncio.ensure_future(asyncio.to_thread(count_input_rows, job, self.run.split))
        next_tick = 0.0
        try:
            while True:
                await asyncio.sleep(FLUSH_INTERVAL_S)
                try:
                    self.out.flush()
                except OutputError as exc:  # disk full, ...: stop cleanly; the output stays consistent
                    self.dispatcher.abort(exc)
                    return
                if self.controller is not None:
                    self.controller.follow(self.monitor.fleet)
                if self.backlog is not None and self.backlog.enabled:
                    self.dispatcher.hold(self.backlog.why())
                if total.done() and self.tracker.total is None and not total.cancelled():
                    self.tracker.total = total.result()
                self.sync_counts()
                now = self.run.clock()
                if now >= next_tick:
                    next_tick = now + TICK_INTERVAL_S
                    snap = self.display.tick()
                    self.monitor.tick(snap)
                    if self.on_tick is not None:
                        self.on_tick(snap)
        finally:
            total.cancel()


def start_background(
    stack: contextlib.AsyncExitStack, run: RunState, housekeeping: Housekeeping, dispatcher: Dispatcher
) -> None:
    """The housekeeping loop and the servers-file follower, each cancelled when the run ends."""
    tasks = [asyncio.create_task(housekeeping.loop(), name="tokenmill-housekeeping")]
    if run.job.servers_file:
        path = Path(run.job.servers_file)
        tasks.append(asyncio.create_task(follow(path, dispatcher.pool, run.job.servers_file_poll_s)))

    async def cancel() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    stack.push_async_callback(cancel)


def handle_signals(stack: contextlib.AsyncExitStack, run: RunState, dispatcher: Dispatcher) -> None:
    loop = asyncio.get_running_loop()
    stops = 0

    def on_signal() -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            log.warning("stop requested: finishing requests in flight (press again to stop at once)")
            dispatcher.request_stop()
        elif run.dispatch is not None:
            run.dispatch.cancel()

    def remove() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    stack.callback(remove)


def count_input_rows(job: JobSpec, split: Split | None = None) -> int | None:
    try:
        rows = count_rows(job.input, split)
        return None if rows is None else rows * job.samples  # samples: N prompts a row
    except Exception:  # an estimate only; the run itself reports real input errors
        return None
