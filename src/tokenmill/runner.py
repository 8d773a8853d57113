"""One job end to end: open the output (rebuilding the done set from it), stream the input, dispatch, write,
show progress, and leave a summary. ``run_job`` is what ``tokenmill run`` and ``tokenmill demo`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from tokenmill.backends import BackendOptions, make_backend, probe_token_ids
from tokenmill.config import JobSpec
from tokenmill.control import ConcurrencyController
from tokenmill.dispatch import Dispatcher
from tokenmill.errors import ConfigError, InputError, OutputError
from tokenmill.feed import PromptFeed
from tokenmill.monitor.runtime import RunMonitor
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.output import OutputDir, ResumeState
from tokenmill.output.fsio import atomic_write
from tokenmill.progress import Display, Tracker
from tokenmill.records import Prompt, Skip
from tokenmill.summary import Summary, write_summary
from tokenmill.upload import Uploader, UploadStatus

log = logging.getLogger("tokenmill.run")

JOB_FILE = "job.json"
# Fields that change what a completion is; a rerun with other values would mix two datasets in one output.
FINGERPRINT_FIELDS = ("input", "api", "model", "sampling", "save_token_ids")
# Input fields that only select rows (trial runs): changing them between runs is fine.
SELECTION_FIELDS = ("offset", "limit", "on_bad_row")
FLUSH_INTERVAL_S = 0.5
TICK_INTERVAL_S = 1.0
PROBE_SERVERS = 3  # servers tried in turn for the token-ids probe (the first that answers decides)


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


def _identity(job: JobSpec) -> dict[str, Any]:
    data = job.model_dump(mode="json", include=set(FINGERPRINT_FIELDS))
    for key in SELECTION_FIELDS:
        data["input"].pop(key, None)
    return data


def check_job_identity(out: Path, job: JobSpec, allow_changed: bool) -> str:
    """Record the job in ``OUT/job.json`` on the first run; refuse a different job later. Returns the job id."""
    path = out / JOB_FILE
    ident = _identity(job)
    digest = hashlib.sha256(orjson.dumps(ident, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if path.exists():
        try:
            old = orjson.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise OutputError(f"{path} is unreadable ({exc}); restore it or use a new output directory") from exc
        if old.get("fingerprint") != digest and not allow_changed:
            before = old.get("identity", {})
            changed = sorted(k for k in ident if before.get(k) != ident[k])
            raise ConfigError(
                f"{out} holds output of a different job (changed: {', '.join(changed) or 'unknown'}). "
                "Mixing them would make one corpus from two setups: use a new output.dir, or pass "
                "--allow-changed-job if this is intended."
            )
        return str(old.get("job_id", ""))
    job_id = uuid.uuid4().hex
    record = {
        "job_id": job_id,
        "fingerprint": digest,
        "identity": ident,
        "spec": job.model_dump(mode="json"),
        "created_at": time.time(),
    }
    # fsynced: after a machine crash the job id must still be there (it owns the output.remote prefix)
    atomic_write(path, orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return job_id


def _input_rows(job: JobSpec, partition: tuple[int, int] | None = None) -> Callable[[], Iterator[Prompt | Skip]]:
    from tokenmill.sources import iter_prompts

    if partition is None:
        return lambda: iter_prompts(job.input)
    from tokenmill.fleet.partitions import only_partition

    return lambda: only_partition(iter_prompts(job.input), *partition)


def _count_rows(job: JobSpec) -> int | None:
    try:
        from tokenmill.sources import count_rows
    except ImportError:
        return None
    try:
        return count_rows(job.input)
    except Exception:  # an estimate only; the run itself reports real input errors
        return None


def _follow_servers_file(job: JobSpec, dispatcher: Dispatcher) -> asyncio.Task[None] | None:
    """Follow the servers that ``tokenmill fleet`` adds, drains or removes in the servers file."""
    if not job.servers_file:
        return None
    from tokenmill.fleet.endpoints import follow

    path = Path(job.servers_file)
    return asyncio.create_task(follow(path, dispatcher, job.servers_file_poll_s), name="tokenmill-fleet-follow")


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
) -> RunResult:
    """Run ``job`` until every prompt is recorded or a stop is requested; safe to rerun after any crash."""
    servers = job.resolved_servers()
    options = BackendOptions(
        model=job.model,
        sampling=job.sampling,
        api_key=job.api_key(),
        save_token_ids=job.save_token_ids,
        tokenizer=job.tokenizer,
        max_response_bytes=int(job.retry.max_response_mb * (1 << 20)),
    )
    backend = make_backend(job.api, options)
    await _probe_token_ids(job, options, servers)
    out_path = Path(job.output.dir)
    uploader = (
        Uploader(out_path, job.output, allow_existing_prefix=allow_existing_prefix) if job.output.remote else None
    )
    out = OutputDir(
        out_path,
        shard_size=job.output.shard_size,
        on_seal=uploader.enqueue if uploader else None,
        partition=partition[0] if partition else None,  # (index, count): this client's share of the input
    )
    state = out.open()
    for msg in state.repaired:
        log.warning("output repaired: %s", msg)
    job_id = check_job_identity(out_path, job, allow_changed_job)
    if uploader is not None:
        await _start_upload(uploader, job_id, out)
    dispatcher = Dispatcher(
        servers,
        backend,
        out,
        job.retry,
        job.concurrency if isinstance(job.concurrency, int) else job.control.initial,
        model=job.model,
        sampling=job.sampling.as_dict(),
        clock=clock,
        adaptive=job.concurrency == "auto",
    )
    # concurrency: auto — each server's in-flight target follows its metrics, one monitor round at a time
    controller = ConcurrencyController(dispatcher.servers, job.control) if dispatcher.adaptive else None
    feed = PromptFeed(_input_rows(job, partition), state.done, out.skip)
    run_id = uuid.uuid4().hex[:12]
    monitor = RunMonitor(job, dispatcher, out_path, run_id, clock=clock, partition=partition[0] if partition else None)
    tracker = Tracker(
        dispatcher,
        clock=clock,
        monitor=monitor,
        history_points=job.monitor.history_points,
        history_every_s=job.monitor.scrape_interval_s,
    )
    before = (state.completed, state.failed)
    tracker.done_before = sum(before)
    display = Display(tracker, job.status_interval_s, live=live)
    if state.completed or state.failed:
        log.info("resuming %s: %d completed, %d failed already recorded", out_path, state.completed, state.failed)

    loop = asyncio.get_running_loop()
    stops = 0

    def on_signal() -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            log.warning("stop requested: finishing requests in flight (press again to stop at once)")
            dispatcher.request_stop()
        else:
            for task in asyncio.all_tasks(loop):
                if task.get_name() == "tokenmill-dispatch":
                    task.cancel()

    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)

    async def housekeeping() -> None:
        total_task = asyncio.ensure_future(asyncio.to_thread(_count_rows, job))
        next_tick = 0.0
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            try:
                out.flush()
            except OutputError as exc:  # disk full, ...: stop cleanly; the output stays consistent
                dispatcher.abort(exc)
                return
            if controller is not None:
                controller.follow(monitor.fleet)
            if total_task.done() and tracker.total is None and not total_task.cancelled():
                tracker.total = total_task.result()
            if feed.counts.exhausted:
                tracker.total = feed.counts.rows
            tracker.skipped = feed.counts.skipped
            now = clock()
            if now >= next_tick:
                next_tick = now + TICK_INTERVAL_S
                snap = display.tick()
                monitor.tick(snap)
                if on_tick is not None:
                    on_tick(snap)

    await monitor.start(tracker.total, tracker.done_before)
    display.start()
    house = asyncio.create_task(housekeeping(), name="tokenmill-housekeeping")
    follower = _follow_servers_file(job, dispatcher)
    dispatch = asyncio.create_task(dispatcher.run(feed), name="tokenmill-dispatch")
    finished = False
    try:
        finished = await dispatch
    except asyncio.CancelledError:
        finished = False
    finally:
        feed.close()
        house.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await house
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        tracker.skipped = feed.counts.skipped
        if feed.counts.exhausted:
            tracker.total = feed.counts.rows
        final = display.stop()
        await monitor.stop(final, finished)
        out.close(seal=finished)
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
    if finished and feed.counts.rows == 0:
        raise InputError(f"the input holds no rows ({job.input.path or job.input.hf}); check input.path / input.hf")
    summary = Summary.build(job, final, dispatcher, before, finished)
    if partition is None:  # a partitioned run's summary is its driver's
        write_summary(out_path, summary)
    upload = await _finish_upload(uploader, finished, state) if uploader is not None else None
    return RunResult(finished=finished, summary=summary, resume=state, upload=upload)


async def _probe_token_ids(job: JobSpec, options: BackendOptions, servers: list[str]) -> None:
    """``save_token_ids``: refuse at start a server that would answer without ids (before the output opens)."""
    if not job.save_token_ids:
        return
    timeout = aiohttp.ClientTimeout(sock_connect=job.retry.connect_timeout_s, total=job.retry.read_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await probe_token_ids(job.api, options, session, servers[:PROBE_SERVERS])


async def _start_upload(uploader: Uploader, job_id: str, out: OutputDir) -> None:
    """Start the uploader; a refused remote prefix stops the run before anything is generated."""
    uploader.start(job_id)
    try:
        await uploader.started()
    except BaseException:
        uploader.abort()
        out.close(seal=False)
        raise


async def _finish_upload(uploader: Uploader, finished: bool, state: ResumeState) -> UploadStatus:
    """Wait for pending uploads (bounded by upload.drain_timeout_s) and say where the upload stands."""
    status = await uploader.drain(finished, {"failed": state.failed, "skipped": len(state.skipped_sources)})
    log.log(logging.INFO if status.complete else logging.WARNING, "%s", status.line())
    return status
