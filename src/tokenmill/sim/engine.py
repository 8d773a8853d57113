"""The async side of the simulated engine: drives the :class:`~tokenmill.sim.scheduler.Scheduler` on a virtual
clock of its own, in iterations as SGLang's event loop runs, and turns finished requests into resolved futures.

The engine's clock is virtual: it stands still while the engine idles and moves only by the durations the step
model gives (already multiplied by ``time_scale``), so the same requests give the same counts however busy the
machine is. Wall time only paces it: the engine sleeps for the virtual time up to its next event (a finish, a log
boundary, the end of a prefill); when the machine is too busy to wake it on time, the virtual clock simply falls
behind the wall clock, it never jumps to catch up.

Requests are received at iteration boundaries, as SGLang's ``event_loop_normal`` receives them before it picks the
next batch: a request that arrives while a step (decode or prefill) runs waits in an inbox for the end of that step,
and everything in the inbox then enters the queue together and is admitted as one prefill batch if it fits
(:meth:`~tokenmill.sim.scheduler.Scheduler.submit_many`). An idle engine woken by an arrival first holds a receive
window (:mod:`tokenmill.sim.receive`) whose quiet span grows with how late the host runs the engine's timers, so a
burst of separate requests sent together is received together however busy the machine is; the virtual clock
stands still meanwhile. In ``instant`` mode nothing is scheduled: every request is answered at once and only
counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Sequence

from tokenmill.config import SimSpec
from tokenmill.sim.metrics import RequestMetrics
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.receive import HEARTBEAT_S, QUIET_PASSES, HostLag, ReceiveWindow
from tokenmill.sim.scheduler import QueueFullError, Scheduler, SchedulerSnapshot, SimRequest, State, Timing
from tokenmill.sim.timing import LinearStepModel, StepModel

__all__ = ["EngineClosedError", "QueueFullError", "SimEngine", "Timing", "default_step_model"]


class EngineClosedError(Exception):
    """The engine is shutting down; the request was not (or not fully) served."""


_INSTANT = Timing(0.0, 0.0, 0.0)


class SimEngine:
    """A simulated SGLang scheduler on the running event loop. Use ``await start()`` / ``await close()``."""

    def __init__(self, cfg: SimSpec, model: StepModel | None = None, prefix: PrefixCache | None = None) -> None:
        self.model: StepModel = model if model is not None else default_step_model(cfg)
        self.scheduler = Scheduler(
            self.model,
            time_scale=cfg.time_scale,
            max_queued=cfg.max_queued_requests,
            log_interval=cfg.decode_log_interval,
            prefix=prefix,
        )
        self.metrics = RequestMetrics()
        self._instant = cfg.instant
        self._max_lag = cfg.max_lag_s
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[bool] | None = None
        self._closed = False
        self._inbox: list[SimRequest] = []
        self._arrivals = 0  # requests put in the inbox so far (the idle engine's receive window)
        self._lag = HostLag()  # how late the host runs this engine's timers (sizes the receive window)
        self.now = 0.0  # the virtual clock: where the scheduler stands (scaled seconds)
        self._wall_at_now = 0.0  # the loop's time when the virtual clock was last moved

    async def start(self) -> None:
        if self._task is None:
            self._wall_at_now = asyncio.get_running_loop().time()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tokenmill-sim-engine")

    async def close(self) -> None:
        """Stop scheduling; every unfinished request fails with :class:`EngineClosedError`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for r in [*self._inbox, *self.scheduler.drain()]:
            if r.waiter is not None and not r.waiter.done():
                r.waiter.set_exception(EngineClosedError("the simulated server is shutting down"))
        self._inbox.clear()

    async def generate(
        self,
        prompt_tokens: int,
        output_tokens: int,
        max_new_tokens: int = 0,
        cached_tokens: int = 0,
        *,
        ignore_eos: bool = False,
        prompt_ids: Sequence[int] = (),
        output_ids: Sequence[int] = (),
    ) -> Timing:
        """Serve one request of ``output_tokens`` tokens, asked with a limit of ``max_new_tokens`` (what a
        finite KV pool reserves for; at least ``output_tokens``), ``cached_tokens`` of its prompt served by
        the prefix cache (with a prefix cache of the engine's own: what it serves ``prompt_ids`` when the
        request is admitted; ``output_ids`` are cached with the prompt when it finishes); ``ignore_eos``
        requests reserve their whole remaining output at admission. The request is received at the engine's
        next iteration boundary, with whatever else arrived during that step. Raises :class:`QueueFullError`
        or :class:`EngineClosedError`.

        Cancelling the caller (a client that hung up) aborts the request and frees its slot.
        """
        if self._closed:
            raise EngineClosedError("the simulated server is shutting down")
        if self._instant:
            self.metrics.observe_finished(prompt_tokens, output_tokens, _INSTANT, cached_tokens)
            return _INSTANT
        req = SimRequest(
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrived=math.nan,  # set when the engine receives it
            max_new_tokens=max_new_tokens,
            cached_tokens=cached_tokens,
            ignore_eos=ignore_eos,
            prompt_ids=prompt_ids,
            output_ids=output_ids,
        )
        req.waiter = asyncio.get_running_loop().create_future()
        self._inbox.append(req)
        self._arrivals += 1
        self._poke()
        try:
            await req.waiter
        except asyncio.CancelledError:
            if req in self._inbox:
                self._inbox.remove(req)
            elif req.state in (State.WAITING, State.RUNNING):
                self._settle(self.scheduler.abort(req, self.now))
                self.metrics.aborted += 1
                self._poke()
            raise
        return _timing(req)

    def pause(self) -> None:
        """Freeze scheduling (requests queue up) until :meth:`resume`; instant mode ignores it."""
        self._settle(self.scheduler.pause(self.now))
        self._poke()

    def resume(self) -> None:
        self._settle(self.scheduler.resume(self.now))
        self._poke()

    def snapshot(self) -> SchedulerSnapshot:
        """The scheduler's state at its virtual clock (requests still in the inbox count as waiting), its decode
        counter as of now."""
        snap = self.scheduler.snapshot(self._decoded_since())
        if self._inbox:
            snap = dataclasses.replace(snap, waiting=snap.waiting + len(self._inbox))
        return snap

    def published(self) -> SchedulerSnapshot:
        """What ``/metrics`` shows now: the gauges as the scheduler last wrote them, the counters as of now."""
        return self.scheduler.published(self._decoded_since())

    def _decoded_since(self) -> int:
        """Tokens decoded since the virtual clock last moved, by the wall time the engine has slept towards its
        next event (a counter between two events moves as the steps run; no decision is taken on it)."""
        if self._task is None:
            return 0
        elapsed = asyncio.get_running_loop().time() - self._wall_at_now
        return self.scheduler.decoded_by(self.now + max(0.0, elapsed))

    def _settle(self, done: list[SimRequest]) -> None:
        for r in done:
            self.metrics.observe_finished(r.prompt_tokens, r.output_tokens, _timing(r), r.cached_tokens)
            if r.waiter is not None and not r.waiter.done():
                r.waiter.set_result(None)

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(True)

    def _receive(self) -> None:
        """The iteration's receive: everything in the inbox enters the queue at once, at the virtual now."""
        batch, self._inbox = self._inbox, []
        for r in batch:
            r.arrived = self.now
        done, refused = self.scheduler.submit_many(batch, self.now)
        for r in refused:
            self.metrics.aborted += 1
            if r.waiter is not None and not r.waiter.done():
                r.waiter.set_exception(QueueFullError("The request queue is full."))
        self._settle(done)

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """An idle engine's receive window: wait for the rest of a burst until no request has arrived for the quiet
        span (:class:`~tokenmill.sim.receive.HostLag`), then for a few event-loop passes."""
        window = ReceiveWindow(loop.time())
        seen = self._arrivals
        while True:
            due = window.closes_at(self._lag)
            poked = await self._sleep(loop, due)
            woke = loop.time()
            if not poked:
                self._lag.observe(due, woke)
            if self._arrivals == seen and woke >= due:
                for _ in range(QUIET_PASSES):
                    await asyncio.sleep(0)
                if self._arrivals == seen:
                    return
            if self._arrivals != seen:
                seen = self._arrivals
                window.arrived(loop.time())

    async def _idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for a poke (an arrival, a resume), waking every ``HEARTBEAT_S`` to see how late the timers run."""
        while True:
            due = loop.time() + HEARTBEAT_S
            if await self._sleep(loop, due):
                return
            self._lag.observe(due, loop.time())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._inbox:
                if self.scheduler.idle():
                    await self._gather(loop)
                    self._wall_at_now = loop.time()  # the virtual clock stood still meanwhile
                self._receive()
            at = self.scheduler.next_event_at()
            if at is None and not self._inbox:
                await self._idle(loop)  # only an arrival (or a resume) changes anything
                self._wall_at_now = loop.time()  # the virtual clock stood still meanwhile
                continue
            if at is None:
                continue
            # sleep to the next event; an arrival meanwhile shortens the sleep to the step boundary under way
            target = max(at, self.now)
            while True:
                due = self._wall_at_now + (target - self.now)
                poked = await self._sleep(loop, due)
                if not poked:
                    self._lag.observe(due, loop.time())
                if not poked or target <= self.now:
                    break
                if self._inbox:
                    seen = min(target, self.now + max(0.0, loop.time() - self._wall_at_now))
                    target = min(target, self.scheduler.boundary_at_or_after(seen))
                else:  # an abort or a pause: the next event may have moved
                    nxt = self.scheduler.next_event_at()
                    target = self.now if nxt is None else min(target, max(nxt, self.now))
            # the clock moves by what was simulated, however late the wake; a lag past max_lag_s is dropped
            self._wall_at_now = max(self._wall_at_now + target - self.now, loop.time() - self._max_lag)
            self.now = target
            self._settle(self.scheduler.advance(self.now))

    async def _sleep(self, loop: asyncio.AbstractEventLoop, until: float | None) -> bool:
        """Wait until the loop's time ``until`` (None: until poked) or a poke; True when poked."""
        wake: asyncio.Future[bool] = loop.create_future()
        self._wake = wake
        handle = loop.call_at(until, _set_done, wake) if until is not None else None
        try:
            return await wake
        finally:
            self._wake = None
            if handle is not None:
                handle.cancel()


def default_step_model(cfg: SimSpec) -> StepModel:
    """The twin when ``cfg.gpu`` names a GPU (pools and times from the planner), else fixed step times."""
    if cfg.gpu is not None:
        from tokenmill.sim.twin import TwinStepModel  # the planner is imported only for a twin

        return TwinStepModel.from_config(cfg)
    return LinearStepModel(cfg)


def _timing(r: SimRequest) -> Timing:
    return Timing(
        r.started - r.arrived, r.first_token - r.arrived, r.finished - r.arrived, r.retractions, r.cached_tokens
    )


def _set_done(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
