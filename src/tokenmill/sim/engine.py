"""The async side of the simulated engine: drives the :class:`~tokenmill.sim.scheduler.Scheduler` on the
event loop's clock and turns finished requests into resolved futures.

One background task sleeps until the scheduler's next event (a finish, a log boundary, the end of a
prefill) or until an arrival pokes it; arrivals themselves advance the scheduler synchronously, so the
queue limit sees an up-to-date queue. In ``instant`` mode nothing is scheduled: every request is answered
at once and only counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from tokenmill.config import SimSpec
from tokenmill.sim.metrics import RequestMetrics
from tokenmill.sim.prefix import PrefixCache
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
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._closed = False

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tokenmill-sim-engine")

    async def close(self) -> None:
        """Stop scheduling; every unfinished request fails with :class:`EngineClosedError`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for r in self.scheduler.drain():
            if r.waiter is not None and not r.waiter.done():
                r.waiter.set_exception(EngineClosedError("the simulated server is shutting down"))

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
        arrived: float | None = None,
    ) -> Timing:
        """Serve one request of ``output_tokens`` tokens, asked with a limit of ``max_new_tokens`` (what a
        finite KV pool reserves for; at least ``output_tokens``), ``cached_tokens`` of its prompt served by
        the prefix cache (with a prefix cache of the engine's own: what it serves ``prompt_ids`` when the
        request is admitted; ``output_ids`` are cached with the prompt when it finishes); ``ignore_eos``
        requests reserve their whole remaining output at admission; ``arrived`` (on the loop's clock, not
        later than now) is when it reached the server: the items of one batch call arrive together, as SGLang
        receives them. Raises :class:`QueueFullError` or :class:`EngineClosedError`.

        Cancelling the caller (a client that hung up) aborts the request and frees its slot.
        """
        if self._closed:
            raise EngineClosedError("the simulated server is shutting down")
        if self._instant:
            self.metrics.observe_finished(prompt_tokens, output_tokens, _INSTANT, cached_tokens)
            return _INSTANT
        loop = asyncio.get_running_loop()
        req = SimRequest(
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrived=loop.time() if arrived is None else min(arrived, loop.time()),
            max_new_tokens=max_new_tokens,
            cached_tokens=cached_tokens,
            ignore_eos=ignore_eos,
            prompt_ids=prompt_ids,
            output_ids=output_ids,
        )
        req.waiter = loop.create_future()
        self._settle(self.scheduler.advance(req.arrived))  # the queue limit sees the queue as of now
        try:
            self._settle(self.scheduler.submit(req, req.arrived))
        except QueueFullError:
            self.metrics.aborted += 1
            raise
        self._poke()
        try:
            await req.waiter
        except asyncio.CancelledError:
            if req.state in (State.WAITING, State.RUNNING):
                self._settle(self.scheduler.abort(req, loop.time()))
                self.metrics.aborted += 1
                self._poke()
            raise
        return _timing(req)

    def pause(self) -> None:
        """Freeze scheduling (requests queue up) until :meth:`resume`; instant mode ignores it."""
        self._settle(self.scheduler.pause(asyncio.get_running_loop().time()))
        self._poke()

    def resume(self) -> None:
        self._settle(self.scheduler.resume(asyncio.get_running_loop().time()))
        self._poke()

    def snapshot(self) -> SchedulerSnapshot:
        """The scheduler's state now (advanced to the current time first)."""
        if self._task is not None:
            self._settle(self.scheduler.advance(asyncio.get_running_loop().time()))
            self._poke()
        return self.scheduler.snapshot()

    def published(self) -> SchedulerSnapshot:
        """What ``/metrics`` shows now: the gauges as the scheduler last wrote them (advanced to now first)."""
        self.snapshot()
        return self.scheduler.published()

    def _settle(self, done: list[SimRequest]) -> None:
        for r in done:
            self.metrics.observe_finished(r.prompt_tokens, r.output_tokens, _timing(r), r.cached_tokens)
            if r.waiter is not None and not r.waiter.done():
                r.waiter.set_result(None)

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._settle(self.scheduler.advance(loop.time()))
            at = self.scheduler.next_event_at()
            wake: asyncio.Future[None] = loop.create_future()
            self._wake = wake
            handle = loop.call_at(at, _set_done, wake) if at is not None else None
            try:
                await wake
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


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
