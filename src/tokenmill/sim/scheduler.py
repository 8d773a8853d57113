"""Continuous batching as a synchronous state machine: time is an argument, never read from a clock.

The scheduler does not touch every running request on every step. It keeps a global step counter, the
number of running requests, the tokens they hold, and a heap of the step at which each will finish; the
state between two events (a finish, a log boundary every ``log_interval`` steps, the end of a prefill) is
advanced in one arithmetic jump. The async driver (:mod:`tokenmill.sim.engine`) calls :meth:`advance`
when something arrives or when :meth:`next_event_at` says something is due, so a busy simulator wakes
about once per finishing request, and an idle one never.

A request's life, for ``output_tokens = L``::

    submit ─▶ waiting (FIFO) ─▶ admitted: prefill (decode pauses) ─▶ first token ─▶ L-1 decode steps ─▶ done

A prefill that starts while requests are decoding keeps the progress of the step it interrupted, so no
decode time is lost or counted twice; requests admitted while a prefill runs join it and extend it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from tokenmill.sim.timing import PoolUsage, StepModel

log = logging.getLogger("tokenmill.sim")

_EPS = 1e-6  # in steps: absorbs float error when a wake-up lands exactly on a step boundary


class QueueFullError(Exception):
    """The waiting queue already holds ``max_queued_requests`` requests."""


class State(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    ABORTED = "aborted"


@dataclass(eq=False, slots=True)
class SimRequest:
    """One generation in the scheduler; times are on the caller's clock."""

    prompt_tokens: int
    output_tokens: int
    arrived: float
    started: float = math.nan
    first_token: float = math.nan
    finished: float = math.nan
    admit_step: int = 0
    finish_step: int = 0
    state: State = State.WAITING
    waiter: asyncio.Future[None] | None = None  # owned by the async driver


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """What the metrics and info endpoints show."""

    running: int
    waiting: int
    ctx_tokens: int
    usage: PoolUsage
    gen_throughput: float
    decode_tokens: int
    prefill_tokens: int
    paused: bool


class Scheduler:
    """FIFO admission up to the step model's capacity, decode steps timed by the step model."""

    def __init__(self, model: StepModel, *, time_scale: float, max_queued: int | None, log_interval: int) -> None:
        self.model = model
        self._scale = time_scale
        self._max_queued = max_queued
        self._interval = log_interval
        self.step = 0
        self.running = 0
        self.ctx_tokens = 0
        self.waiting = 0
        self.decode_tokens = 0
        self.prefill_tokens = 0
        self._queue: deque[SimRequest] = deque()
        self._heap: list[tuple[int, int, SimRequest]] = []
        self._seq = 0
        self._t_base = 0.0  # when the current decode step began
        self._prefill_end: float | None = None
        self._partial = 0.0  # progress into the decode step a prefill interrupted
        self._prefilling: list[SimRequest] = []
        self._paused_at: float | None = None
        self._gen_throughput = 0.0
        self._window = (0.0, 0)  # (time, decode_tokens) at the last log boundary
        self._last_prefill_at = 0.0

    # ---- driving -------------------------------------------------------------------------------------

    # Every public call leaves the scheduler settled at ``now``: finished requests are handed back, and a
    # request still waiting afterwards does not fit (or the scheduler is paused).

    def submit(self, req: SimRequest, now: float) -> list[SimRequest]:
        """Queue ``req``, admitting it if it fits; returns requests that finished by ``now``.

        Raises :class:`QueueFullError` (changing nothing) if ``max_queued`` requests already wait; call
        :meth:`advance` first so that the queue is counted as of ``now``.
        """
        if self._max_queued is not None and self.waiting >= self._max_queued:
            raise QueueFullError("The request queue is full.")
        self._queue.append(req)
        self.waiting += 1
        return self.advance(now)

    def advance(self, now: float) -> list[SimRequest]:
        """Run the engine up to ``now`` and admit what fits; returns the requests that finished."""
        done: list[SimRequest] = []
        if self._paused_at is not None:
            return done
        while True:
            self._catch_up(now, done)
            if not self._admit(now):
                return done

    def next_event_at(self) -> float | None:
        """When :meth:`advance` next has something to do (None: only an arrival can change anything)."""
        if self._paused_at is not None:
            return None
        if self._prefill_end is not None:
            return self._prefill_end
        if self.running == 0:
            return None
        dt = self._step_dt()
        if dt <= 0:
            return self._t_base
        return self._t_base + (self._next_target() - self.step) * dt

    def abort(self, req: SimRequest, now: float) -> list[SimRequest]:
        """Drop ``req`` (client gone), freeing its slot; returns requests that finished by ``now``."""
        done: list[SimRequest] = []
        if self._paused_at is None:
            self._catch_up(now, done)
        if req.state is State.WAITING:
            self.waiting -= 1  # its queue entry is skipped when reached
        elif req.state is State.RUNNING:
            self._release(req)
        else:
            return done
        req.state = State.ABORTED
        done.extend(self.advance(now))  # the freed slot may admit a waiting request
        return done

    def pause(self, now: float) -> list[SimRequest]:
        """Freeze the engine at ``now`` (requests keep queueing); returns what finished before."""
        done = self.advance(now)
        if self._paused_at is None:
            self._paused_at = now
        return done

    def resume(self, now: float) -> list[SimRequest]:
        """Continue after :meth:`pause`, as if the paused time never passed; admits what queued meanwhile."""
        if self._paused_at is not None:
            shift = now - self._paused_at
            self._paused_at = None
            self._t_base += shift
            if self._prefill_end is not None:
                self._prefill_end += shift
        return self.advance(now)

    def drain(self) -> list[SimRequest]:
        """Every unfinished request (waiting or running), marked aborted; for shutdown."""
        live = [r for r in self._queue if r.state is State.WAITING]
        live += [r for _, _, r in self._heap if r.state is State.RUNNING]
        for r in live:
            r.state = State.ABORTED
        self._queue.clear()
        self._heap.clear()
        self._prefilling.clear()
        self.running = self.waiting = self.ctx_tokens = 0
        return live

    def snapshot(self) -> SchedulerSnapshot:
        return SchedulerSnapshot(
            running=self.running,
            waiting=self.waiting,
            ctx_tokens=self.ctx_tokens,
            usage=self.model.usage(self.running, self.ctx_tokens),
            gen_throughput=self._gen_throughput if self.running else 0.0,
            decode_tokens=self.decode_tokens,
            prefill_tokens=self.prefill_tokens,
            paused=self._paused_at is not None,
        )

    # ---- internals -----------------------------------------------------------------------------------

    def _step_dt(self) -> float:
        return self.model.step_time_s(self.running, self.ctx_tokens) * self._scale

    def _next_target(self) -> int:
        """The next step at which something happens: the earliest finish or the next log boundary."""
        heap = self._heap
        while heap[0][2].state is not State.RUNNING:  # aborted entries are dropped lazily
            heapq.heappop(heap)
        boundary = (self.step // self._interval + 1) * self._interval
        return min(heap[0][0], boundary)

    def _catch_up(self, now: float, done: list[SimRequest]) -> None:
        while True:
            if self._prefill_end is not None:
                if now < self._prefill_end:
                    return
                self._end_prefill(done)
                continue
            if self.running == 0:
                return
            dt = self._step_dt()
            n = self._next_target() - self.step
            if dt > 0:
                k = min(n, int((now - self._t_base) / dt + _EPS))
                if k <= 0:
                    return
            else:
                k = n
                self._t_base = now
            self.step += k
            self._t_base += k * dt
            self.decode_tokens += self.running * k
            self.ctx_tokens += self.running * k
            if self.step % self._interval == 0:
                self._on_log_boundary()
            self._pop_finished(self._t_base, done)
            if k < n:
                return

    def _end_prefill(self, done: list[SimRequest]) -> None:
        assert self._prefill_end is not None
        t = self._prefill_end
        self._prefill_end = None
        self._t_base = t - self._partial
        self._partial = 0.0
        for r in self._prefilling:
            r.first_token = t
        self._prefilling.clear()
        self._pop_finished(t, done)

    def _pop_finished(self, t: float, done: list[SimRequest]) -> None:
        heap = self._heap
        while heap and heap[0][0] <= self.step:
            r = heapq.heappop(heap)[2]
            if r.state is not State.RUNNING:
                continue
            r.state = State.DONE
            r.finished = t
            self._release(r)
            done.append(r)

    def _release(self, r: SimRequest) -> None:
        """Give back a running request's slot and tokens (its prompt, first token and decoded tokens)."""
        self.running -= 1
        self.ctx_tokens -= r.prompt_tokens + 1 + (self.step - r.admit_step)

    def _admit(self, now: float) -> bool:
        """Move waiting requests that fit into a prefill batch; True if any moved."""
        if not self.waiting:
            return False
        running_before = self.running
        batch: list[SimRequest] = []
        queue = self._queue
        while queue:
            r = queue[0]
            if r.state is not State.WAITING:
                queue.popleft()
                continue
            if not self.model.admit(self.running, self.ctx_tokens, r.prompt_tokens):
                break
            queue.popleft()
            self.waiting -= 1
            r.state = State.RUNNING
            r.started = now
            r.admit_step = self.step
            r.finish_step = self.step + max(r.output_tokens, 1) - 1
            self.running += 1
            self.ctx_tokens += r.prompt_tokens + 1  # the prefill yields the first token
            self._seq += 1
            heapq.heappush(self._heap, (r.finish_step, self._seq, r))
            batch.append(r)
        if not batch:
            return False
        new_tokens = sum(r.prompt_tokens for r in batch)
        cost = self.model.prefill_time_s(new_tokens) * self._scale
        if self._prefill_end is None:
            if running_before:
                self._partial = max(0.0, now - self._t_base)
            else:
                self._partial = 0.0
                self._window = (now, self.decode_tokens)  # idle time is not part of throughput
            self._prefill_end = now + cost
        else:
            self._prefill_end += cost
        self._prefilling.extend(batch)
        self.prefill_tokens += new_tokens
        self._log_prefill(now, len(batch), new_tokens)
        return True

    def _on_log_boundary(self) -> None:
        t0, tokens0 = self._window
        span = self._t_base - t0
        if span > 0:
            self._gen_throughput = (self.decode_tokens - tokens0) / span
        self._window = (self._t_base, self.decode_tokens)
        if log.isEnabledFor(logging.INFO):
            u = self.model.usage(self.running, self.ctx_tokens)
            log.info(
                "Decode batch, #running-req: %d, #full token: %d, full token usage: %.2f, mamba num: %d, "
                "mamba usage: %.2f, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d",
                self.running,
                u.used_tokens,
                u.full_token_usage,
                u.mamba_used,
                u.mamba_usage,
                self._gen_throughput,
                self.waiting,
            )

    def _log_prefill(self, now: float, n: int, new_tokens: int) -> None:
        gap = now - self._last_prefill_at
        self._last_prefill_at = now
        if log.isEnabledFor(logging.INFO):
            u = self.model.usage(self.running, self.ctx_tokens)
            log.info(
                "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, full token usage: %.2f, "
                "mamba usage: %.2f, #running-req: %d, #queue-req: %d, #pending-token: 0, cuda graph: False, "
                "input throughput (token/s): %.2f",
                n,
                new_tokens,
                u.full_token_usage,
                u.mamba_usage,
                self.running - n,
                self.waiting,
                new_tokens / gap if gap > 0 else 0.0,
            )
