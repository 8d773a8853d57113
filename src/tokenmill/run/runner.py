"""One job end to end. ``run_job`` is what ``tokenmill run``, ``tokenmill demo`` and each partition's client call.

Its first log line says where it writes (:mod:`tokenmill.run.target`: the job's output and prefix, or a trial
run's). Start-up, in this order; each stage registers its own cleanup on one exit stack as it starts, so an
error at any point unwinds exactly what was started, newest first:

1. **requests**: where the prompt ids come from (``input.id_field``; as recorded in ``OUT/job.json`` when the
   output holds a job), the servers (a first one must answer within ``retry.startup_wait_s``:
   :mod:`tokenmill.run.startup`), the API key and the request shapes (:mod:`tokenmill.run.requests`); with
   ``save_token_ids``, one server is asked for a one-token completion to see that it returns token ids; one is asked
   a question in the job's thinking mode to see whether and where its reasoning comes back (inline in the answer, or
   any with thinking off, stops the run, :mod:`tokenmill.backends.thinking`). Nothing is written before this is done.
2. **lock**: the writer lock on ``OUT`` is taken (the directory created). The lock file names this process and
   the run's phase for ``tokenmill status``: ``starting`` (and what it waits for: the remote stage notes each try
   at a store that does not answer) until the monitor starts, then ``running``. Cleanup: close the output, sealing the
   open shard only when the run finished (or only give the lock up, when it was never opened).
3. **remote**: with ``output.remote``, whose prefix it is and what is done there
   (:mod:`tokenmill.storage.restore`): the claim is read or made; a directory holding none of this writer's
   records (a fresh machine, or one whose disk was lost) takes them over from the remote copy; the other
   writers' records join the done set. A prefix of another job, or one that disagrees with itself, stops the run
   here, before anything is generated.
4. **output**: ``OUT`` is opened (crash damage repaired, the done set rebuilt from the shards and manifests) and
   the job's identity checked against ``job.json``.
5. **upload**: with ``output.remote`` the uploader starts (it claims its writer's manifest) before anything is
   generated. Cleanup on an error: stop the uploader (a normal end drains it after the stack, below).
6. **feed**: the input streams in a thread (a partition's share only), minus the ids already done. Cleanup:
   stop the thread. When the prefix holds this job's ``_SUCCESS`` (the job is finished), a run that finds
   prompts the job does not hold stops here unless it was asked to reopen the job (``--reopen``,
   ``retry-failed``): ``_SUCCESS`` is never withdrawn by a normal run.
7. **watch**: the monitor (scrapes, doctor, event log, exporter) and the display. Cleanup: the display's final
   snapshot, then the monitor's last tick and ``end`` record with it.
8. **housekeeping** every 0.5 s (flush the output, follow the concurrency controller, count the input, tick the
   display and the monitor) and the servers-file follower. Cleanup: cancel both.
9. **signals**: the first SIGINT/SIGTERM stops taking prompts and lets requests in flight finish; the second
   cancels the dispatch. Cleanup: the handlers are removed.

Then the dispatcher runs until every prompt is recorded or a stop; the stack unwinds in the reverse order
(signals, housekeeping, display, monitor, feed, upload, output), after which the summary is written and the
uploads drained (bounded by ``output.upload.drain_timeout_s``), the other records copied and the job marked
complete at the prefix when it is.

The remote stages (3, 5, the finished-job gate of 6 and the drain) live in :mod:`tokenmill.run.remote`, the
background of 8 and 9 in :mod:`tokenmill.run.housekeeping`; what the stages share is a
:class:`~tokenmill.run.runstate.RunState`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tokenmill.autotune.loop import Autotuner
from tokenmill.backends import Backend
from tokenmill.config import JobSpec
from tokenmill.errors import InputError
from tokenmill.monitor.origin import Origins
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.output import OutputDir, ResumeState
from tokenmill.output.identity import check_job_identity, job_with_ids
from tokenmill.records import Prompt, Skip
from tokenmill.run.access import Access
from tokenmill.run.backlog import Backlog
from tokenmill.run.control import ConcurrencyController
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.feed import PromptFeed
from tokenmill.run.housekeeping import Housekeeping, handle_signals, start_background
from tokenmill.run.progress import Display, Tracker
from tokenmill.run.remote import (
    backlog_text,
    copy_summary,
    finish_upload,
    gate_finished_job,
    start_upload,
    take_remote,
)
from tokenmill.run.requests import ask_origins, peek_input, prepare_requests
from tokenmill.run.runstate import RunState
from tokenmill.run.servers import ServerPool
from tokenmill.run.skips import SkipGuard, nothing_completed
from tokenmill.run.summary import Summary, write_summary
from tokenmill.run.target import RunTarget, decide_target
from tokenmill.run.watch import RunMonitor
from tokenmill.run.work import RecordMaker
from tokenmill.sources import iter_prompts
from tokenmill.sources.mapping import conversation_policy
from tokenmill.sources.partition import Split, choose_split
from tokenmill.sources.thinking import describe as describe_thinking
from tokenmill.sources.thinking import with_thinking
from tokenmill.storage.restore import RemoteStart
from tokenmill.storage.upload import Uploader, UploadStatus

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def run_sync(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` on a new event loop, uvloop's when it is installed (it costs the request path about a tenth
    less CPU than asyncio's own loop; see bench/), and return its result."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


@dataclass(slots=True)
class RunResult:
    """How a run ended."""

    finished: bool  # every input row is now completed, failed or skipped
    summary: Summary
    resume: ResumeState
    upload: UploadStatus | None = None  # when output.remote is set


async def run_job(
    job: JobSpec,
    *,
    allow_changed_job: bool = False,
    allow_existing_prefix: bool = False,
    live: bool | None = None,
    install_signals: bool = True,
    clock: Callable[[], float] = time.monotonic,
    on_tick: Callable[[Snapshot], None] | None = None,
    partition: tuple[int, int] | None = None,
    tuner: Autotuner | None = None,  # run --fleet --autotune: fed every scrape round by the monitor
    repair_remote: bool = False,
    target: RunTarget | None = None,
    reopen: str | None = None,
) -> RunResult:
    """Run ``job`` until every prompt is recorded or a stop is requested; safe to rerun after any crash.

    ``partition`` = (index, count): this client's share of the input in a split run. ``repair_remote``: make a
    remote prefix that disagrees with itself match its objects (see :mod:`tokenmill.storage.readback`).
    ``target``: where the run writes (:func:`tokenmill.run.target.decide_target`; None: the job as it is).
    ``reopen``: why this run may add to a job whose prefix already holds its ``_SUCCESS`` (``--reopen``,
    ``retry-failed``); without it such a run stops before generating anything."""
    run, original = _run_state(job, target, clock, partition, reopen or ("--repair-remote" if repair_remote else None))
    job = run.job
    await asyncio.to_thread(peek_input, job)  # a bad input is said at once, before any wait for the servers
    backend, access = await prepare_requests(job)
    async with contextlib.AsyncExitStack() as stack:
        out = _lock_output(stack, run)
        remote = await take_remote(run, out, original, allow_changed_job, allow_existing_prefix, repair_remote)
        state = _open_output(run, out, remote, allow_changed_job)
        uploader = await start_upload(stack, run, out, remote, allow_existing_prefix)
        feed = _start_feed(stack, run, out, state)
        source = await gate_finished_job(run, uploader, feed)
        origins = await ask_origins(stack, job, access)
        dispatcher = _make_dispatcher(run, backend, access, out, origins)
        feed.on_limit = dispatcher.abort  # too many skipped rows: stop, letting the requests in flight finish
        monitor, tracker, display = await _start_watch(stack, run, dispatcher, live, tuner, access)
        out.note("running")
        if run.reopened and uploader is not None:
            monitor.events.write("reopen", prefix=uploader.store.shown, reason=run.reopen)
        controller = _controller(job, dispatcher)
        await _first_look(job, monitor, controller)
        housekeeping = Housekeeping(run, out, feed, dispatcher, controller, monitor, tracker, display, on_tick)
        if uploader is not None:
            tracker.upload = uploader.status
            housekeeping.backlog = Backlog(uploader.status, job.output.upload)
        start_background(stack, run, housekeeping, dispatcher)
        if install_signals:
            handle_signals(stack, run, dispatcher)
        await _dispatch(run, dispatcher, source)
        housekeeping.sync_counts()
        _judge_completed(run, out, feed, dispatcher)
    if run.finished and feed.counts.rows == 0:
        raise InputError(f"the input holds no rows ({job.input.path or job.input.hf}); check input.path / input.hf")
    return await _conclude(run, out, state, uploader, monitor)


async def _conclude(
    run: RunState, out: OutputDir, state: ResumeState, uploader: Uploader | None, monitor: RunMonitor
) -> RunResult:
    """After the stack: the summary written (a partitioned run's is its driver's), the uploads drained and where
    they ended recorded for ``tokenmill status`` (after the monitor's end record), and the summary written again
    with the upload as it ended (its last version is the one after the last upload, at the prefix too)."""
    job = run.job
    assert run.final is not None
    final = run.final
    summary = Summary.from_snapshot(
        final,
        output_dir=job.output.dir,
        model=job.model,
        api=job.api,
        recorded=(run.before[0] + final.completed, run.before[1] + final.failed),
        state="finished" if run.finished else "stopped",
    )
    if run.partition is None:
        write_summary(out.root, summary)  # as the run ended; rewritten below once the uploads are drained
    upload = await finish_upload(uploader, run.finished, state) if uploader is not None else None
    if upload is not None and uploader is not None:
        summary.upload = backlog_text(upload)
        if run.partition is None:
            write_summary(out.root, summary)
            await copy_summary(uploader, out.root, upload)
        monitor.events.write(
            "upload",
            pending=upload.pending,
            pending_bytes=upload.pending_bytes,
            oldest_pending_s=upload.oldest_pending_s,
            error=upload.last_error if upload.pending and upload.failing else None,
            complete=upload.complete,
        )
        monitor.events.close()
    return RunResult(finished=run.finished, summary=summary, resume=state, upload=upload)


# ---- the stages, in start-up order -------------------------------------------------------------------------


def _run_state(
    job: JobSpec,
    target: RunTarget | None,
    clock: Callable[[], float],
    partition: tuple[int, int] | None,
    reopen: str | None,
) -> tuple[RunState, JobSpec]:
    """The run's state (its job where the target says, with its ids as recorded) and the job as given, targeted."""
    target = target or decide_target(job)
    job = target.apply(job)
    log.info("%s", target.line())
    run = RunState(job_with_ids(job), clock, partition, target=target, reopen=reopen)
    if partition is not None:
        run.split = choose_split(run.job.input, run.job.partitioning, *partition)
    return run, job


def _lock_output(stack: contextlib.AsyncExitStack, run: RunState) -> OutputDir:
    job = run.job
    out = OutputDir(
        Path(job.output.dir),
        shard_size=job.output.shard_size,
        partition=run.partition[0] if run.partition else None,
    )
    stack.callback(lambda: out.close(seal=run.finished))
    out.lock()
    out.note("starting")  # `tokenmill status` shows the run as starting until its monitor starts
    return out


def _open_output(run: RunState, out: OutputDir, remote: RemoteStart | None, allow_changed_job: bool) -> ResumeState:
    state = out.open()
    for msg in state.repaired:
        log.warning("output repaired: %s", msg)
    run.job_id = check_job_identity(out.root, run.job, allow_changed_job)
    if remote is not None and remote.others:
        new = remote.others - state.done
        state.done.update(new)
        state.completed += remote.others_completed
        state.failed += remote.others_failed
        log.info("the remote holds %d id(s) other writers of this job recorded; they are done", len(new))
    run.before = (state.completed, state.failed)
    if state.completed or state.failed:
        log.info("resuming %s: %d completed, %d failed already recorded", out.root, state.completed, state.failed)
    return state


def _judge_completed(run: RunState, out: OutputDir, feed: PromptFeed, dispatcher: Dispatcher) -> None:
    """A run that reached the end with no completion in the job while rows were skipped or failed is not
    finished: it stops here, inside the stack, so no _SUCCESS is written and the end record says stopped."""
    if not run.finished or feed.guard is None:
        return
    completed = run.before[0] + dispatcher.stats.completed
    failed = run.before[1] + dispatcher.stats.failed
    problem = nothing_completed(feed.guard, completed, failed, out.root / out.names.failed)
    if problem is not None:
        run.finished = False
        raise problem
    if feed.guard.skipped:
        guard = feed.guard
        log.warning(
            "%d of the %d input rows read were skipped as bad rows: %s", guard.skipped, guard.rows, guard.examples()
        )


def _start_feed(stack: contextlib.AsyncExitStack, run: RunState, out: OutputDir, state: ResumeState) -> PromptFeed:
    if run.split is not None:
        log.info("%s", run.split.describe())
    if run.job.input.mapping != "prompt":
        log.info("conversations: %s", conversation_policy(run.job.input.conversation_turns))
    said = describe_thinking(run.job.asked_thinking(), run.job.input.thinking_field)
    if said is not None:
        log.info("%s", said)
    rows = _input_rows(run.job, run.split)
    guard = SkipGuard(run.job.input, out.root / out.names.skipped)
    feed = PromptFeed(lambda: with_thinking(rows(), run.job.asked_thinking()), state.done, out.skip, guard)
    stack.callback(feed.close)
    return feed


def _make_dispatcher(run: RunState, backend: Backend, access: Access, out: OutputDir, origins: Origins) -> Dispatcher:
    job = run.job
    adaptive = job.concurrency == "auto"
    fixed = None if adaptive else int(job.concurrency)
    pool = ServerPool(
        access.servers,
        job.control.initial if fixed is None else fixed,
        adaptive=adaptive,
        backoff=job.control.throttle_factor,
        # a fixed concurrency is a ceiling: until the monitor sees what a server holds, no more than control.initial
        start=min(fixed, job.control.initial) if fixed is not None and job.monitor.enabled else None,
    )
    pool.on_new_process = origins.forget
    for ep in access.endpoints:  # a server the servers file marks draining or down gets no request
        if not ep.sendable:
            pool.set_draining(ep.url, True)
    sampling = job.sampling.as_dict() | ({"samples": job.samples} if job.samples > 1 else {})
    records = RecordMaker(model=job.model, sampling=sampling, wall=time.time, origin=origins.get)
    return Dispatcher(pool, backend, out, job.retry, records, clock=run.clock)


def _controller(job: JobSpec, dispatcher: Dispatcher) -> ConcurrencyController | None:
    """``concurrency: auto``'s controller, or a fixed concurrency's (its ceiling N) when the servers are watched."""
    if dispatcher.adaptive:
        return ConcurrencyController(dispatcher.servers, job.control)
    if not job.monitor.enabled:
        return None
    return ConcurrencyController(dispatcher.servers, job.control, ceiling=dispatcher.pool.first_limit)


async def _first_look(job: JobSpec, monitor: RunMonitor, controller: ConcurrencyController | None) -> None:
    """Before the first request, the monitor's first look at the servers (their caps, bounded by the scrape's
    timeouts), so the first burst is what each server holds, not a queue that may outwait the read timeout."""
    if controller is None or not job.monitor.enabled:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(monitor.fleet.polled.wait(), 3 * job.monitor.scrape_timeout_s + 1)
    controller.follow(monitor.fleet)


async def _start_watch(
    stack: contextlib.AsyncExitStack,
    run: RunState,
    dispatcher: Dispatcher,
    live: bool | None,
    tuner: Autotuner | None,
    access: Access,
) -> tuple[RunMonitor, Tracker, Display]:
    job = run.job
    partition = run.partition[0] if run.partition else None
    monitor = RunMonitor(
        job,
        dispatcher,
        Path(job.output.dir),
        uuid.uuid4().hex[:12],
        clock=run.clock,
        partition=partition,
        tuner=tuner,
        headers=access.headers,
    )
    tracker = Tracker(
        dispatcher,
        clock=run.clock,
        history_points=job.monitor.history_points,
        history_every_s=job.monitor.scrape_interval_s,
    )
    tracker.done_before = sum(run.before)
    display = Display(tracker, job.status_interval_s, live=live, watch=monitor.state)

    async def stop_monitor() -> None:
        assert run.final is not None
        await monitor.stop(run.final, run.finished)

    def stop_display() -> None:
        run.final = display.stop()

    await monitor.start(tracker.total, tracker.done_before)
    stack.push_async_callback(stop_monitor)
    display.start()
    stack.callback(stop_display)
    return monitor, tracker, display


async def _dispatch(run: RunState, dispatcher: Dispatcher, source: AsyncIterator[Prompt]) -> None:
    """The dispatcher's run as the run's task (the second signal cancels it): whether it finished every prompt."""
    run.dispatch = asyncio.create_task(dispatcher.run(source), name="tokenmill-dispatch")
    try:
        run.finished = await run.dispatch
    except asyncio.CancelledError:
        run.finished = False


# ---- helpers ------------------------------------------------------------------------------------------------


def _input_rows(job: JobSpec, split: Split | None = None) -> Callable[[], Iterator[Prompt | Skip]]:
    return lambda: iter_prompts(job.input, split, job.samples, job.sampling.seed)
