"""Continuous batching as a synchronous state machine: time is an argument, never read from a clock.

The scheduler does not touch every running request on every step. It keeps a global step counter, the
number of running requests, the tokens they hold, and a heap of the step at which each will finish; the
state between two events (a finish, a log boundary every ``log_interval`` steps, the end of a prefill, the
step at which a finite KV pool runs out) is advanced in one arithmetic jump. The async driver
(:mod:`tokenmill.sim.engine`) calls :meth:`advance` when something arrives or when :meth:`next_event_at`
says something is due, so a busy simulator wakes about once per finishing request, and an idle one never.
Waiting requests are admitted at the simulated instant a slot frees, however late the driver wakes.

A request's life, for ``output_tokens = L``::

    submit ─▶ waiting (FIFO) ─▶ admitted: prefill (decode pauses) ─▶ first token ─▶ L-1 decode steps ─▶ done

A prefill is one or more prefill batches, computed ``--chunked-prefill-size`` tokens at a time
(:mod:`tokenmill.sim.prefill`). :meth:`Scheduler.submit_many` queues what one iteration of SGLang's loop receives,
so it is admitted as one batch.

With a :class:`PoolModel` (the twin) the KV pool is finite, as in SGLang: admission also keeps room for the
running requests' future tokens (scaled by the new-token ratio, :class:`KvPolicy`), and when a decode step
would need more KV than is free, running requests are retracted back to the queue. A retracted request
keeps the tokens it generated, but its KV is gone: when admitted again it prefills its prompt plus those
tokens, and then continues.

Four modules beside this event loop: :mod:`tokenmill.sim.requests` (a request's life, the KV policy),
:mod:`tokenmill.sim.batching` (who waits and runs, admission and retraction), :mod:`tokenmill.sim.prefill` (prefill
batches) and :mod:`tokenmill.sim.gauges` (the snapshot, the gauges as SGLang last wrote them, the log lines).
"""

from __future__ import annotations

import heapq
import math

from tokenmill.sim.gauges import SchedulerSnapshot, cuda_graph, hybrid_lines, log_decode
from tokenmill.sim.prefill import PrefillPhase
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.requests import KvPolicy, PoolModel, QueueFullError, SimRequest, State, Timing
from tokenmill.sim.timing import StepModel

__all__ = [
    "KvPolicy",
    "PoolModel",
    "QueueFullError",
    "Scheduler",
    "SchedulerSnapshot",
    "SimRequest",
    "State",
    "Timing",
]

_EPS = 1e-6  # in steps: absorbs float error when a wake-up lands exactly on a step boundary


class Scheduler(PrefillPhase):
    """FIFO admission up to the step model's capacity (:class:`~tokenmill.sim.batching.Batcher`), prefill batches
    (:class:`~tokenmill.sim.prefill.PrefillPhase`), decode steps timed by the step model."""

    def __init__(
        self,
        model: StepModel,
        *,
        time_scale: float,
        max_queued: int | None,
        log_interval: int,
        prefix: PrefixCache | None = None,
    ) -> None:
        super().__init__(model, prefix, time_scale)
        self._max_queued = max_queued
        self._interval = log_interval
        self._paused_at: float | None = None
        self._gen_throughput = 0.0
        self._window = (0.0, 0)  # (time, decode_tokens) at the last log boundary

    # ---- driving -------------------------------------------------------------------------------------

    # Every public call leaves the scheduler settled at ``now``: finished requests are handed back, and a
    # request still waiting afterwards does not fit (or the scheduler is paused).

    def submit(self, req: SimRequest, now: float) -> list[SimRequest]:
        """Queue ``req``, admitting it if it fits; returns requests that finished by ``now``.

        Raises :class:`QueueFullError` (changing nothing) if ``max_queued`` requests already wait.
        """
        done, refused = self.submit_many([req], now)
        if refused:
            raise QueueFullError("The request queue is full.")
        return done

    def submit_many(self, reqs: list[SimRequest], now: float) -> tuple[list[SimRequest], list[SimRequest]]:
        """Queue ``reqs`` together at ``now`` (what one iteration of SGLang's loop receives), then admit what fits
        as one prefill batch; returns the requests that finished by ``now`` and those refused because
        ``max_queued`` requests already waited."""
        done = self.advance(now)  # events before the arrival must not see the new requests
        refused: list[SimRequest] = []
        if reqs and self._kv is not None and self.idle():
            # SGLang re-inits the ratio when its scheduler idles, not when a queue is waiting for the next batch
            self._ratio.set(self._kv.init_ratio, self.step)
        for req in reqs:
            if self._max_queued is not None and self.waiting >= self._max_queued:
                refused.append(req)
                continue
            req.max_new_tokens = max(req.max_new_tokens, req.output_tokens)
            self._queue.append(req)
            self.waiting += 1
        done.extend(self.advance(now))
        return done, refused

    def idle(self) -> bool:
        """Nothing runs, waits or prefills."""
        return not self.running and not self.waiting and self._prefill_end is None

    def boundary_at_or_after(self, t: float) -> float:
        """The first iteration boundary at or after ``t``: the end of the prefill or decode step under way, where
        SGLang's loop next receives requests (``t`` itself when nothing runs)."""
        if self._paused_at is not None or (self.running == 0 and self._prefill_end is None):
            return t
        if self._prefill_end is not None:
            return max(t, self._prefill_end)
        dt = self._step_dt()
        if dt <= 0:
            return t
        return self._t_base + max(0, math.ceil((t - self._t_base) / dt - _EPS)) * dt

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
        if dt <= 0 or self._must_retract():
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
        live += self._live()
        for r in live:
            r.state = State.ABORTED
        self._queue.clear()
        self._heap.clear()
        self._prefilling.clear()
        self._chunks.clear()
        self._chunk_completed = []
        self.running = self.waiting = self.ctx_tokens = 0
        return live

    def decoded_by(self, t: float) -> int:
        """Decode tokens the running requests have made by ``t`` beyond :attr:`decode_tokens`, short of the next
        event (a counter's view between two events; nothing is decided on it)."""
        if self._paused_at is not None or self._prefill_end is not None or self.running == 0:
            return 0
        dt = self._step_dt()
        if dt <= 0 or self._must_retract():
            return 0
        k = min(self._next_target() - self.step - 1, int((t - self._t_base) / dt + _EPS))
        return self.running * max(0, k)

    def snapshot(self, decoded_since: int = 0) -> SchedulerSnapshot:
        """The scheduler's state; ``decoded_since`` (:meth:`decoded_by`) is added to the decode counter."""
        prefix, free = self._prefix, max(0, self.model.max_total_tokens - self.ctx_tokens)
        return SchedulerSnapshot(
            running=self.running,
            waiting=self.waiting,
            ctx_tokens=self.ctx_tokens,
            usage=self.model.usage(self.running, self.ctx_tokens),
            gen_throughput=self._gen_throughput if self.running else 0.0,
            decode_tokens=self.decode_tokens + decoded_since,
            prefill_tokens=self.prefill_tokens,
            prefill_cache_tokens=self.prefill_cache_tokens,
            paused=self._paused_at is not None,
            retracted_requests=self.retracted_requests,
            retracted_input_tokens=self.retracted_input_tokens,
            retracted_output_tokens=self.retracted_output_tokens,
            last_retracted=self._last_retracted,
            new_token_ratio=self._ratio.at(self.step),
            cuda_graph=cuda_graph(self._pool, self.running),
            kv_evictable_tokens=0 if prefix is None else min(prefix.evictable_tokens, free),
            cache_hit_rate=self._hit_rate,
        )

    def published(self, decoded_since: int = 0) -> SchedulerSnapshot:
        """What a ``/metrics`` scrape sees: counters as of now, gauges as SGLang last wrote them (:class:`Gauges`);
        an engine with nothing running or waiting shows its idle state (SGLang writes it as soon as its gauge is
        stale). Only the twin (a :class:`PoolModel`) does this; the plain simulator shows its live state."""
        live = self.snapshot(decoded_since)
        if self._pool is None:
            return live
        return self._gauges.shown(live, idle=self.idle())

    # ---- internals -----------------------------------------------------------------------------------

    def _step_dt(self) -> float:
        return self.model.step_time_s(self.running, self.ctx_tokens) * self._scale

    def _next_target(self) -> int:
        """The next step at which something happens: the earliest finish, the next log boundary, or (finite
        KV) the step after which the pool cannot hold another one."""
        heap = self._heap
        while heap[0][2].seq != heap[0][1] or heap[0][2].state is not State.RUNNING:  # stale entries drop lazily
            heapq.heappop(heap)
        boundary = (self.step // self._interval + 1) * self._interval
        target = min(heap[0][0], boundary)
        if self._kv is not None and self.running > 1:
            target = min(target, self.step + self._kv_free() // self.running)
        return target

    def _catch_up(self, now: float, done: list[SimRequest]) -> None:
        while True:
            if self._prefill_end is not None:
                t = self._prefill_end
                if now < t:
                    return
                self._end_prefill(done)
                self._admit(t)
                continue
            if self.running == 0:
                return
            if self._must_retract():
                self._retract()
                continue
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
            self._admit(self._t_base)  # slots freed at this instant go to waiting requests at this instant

    def _admit(self, now: float) -> bool:
        """Move waiting requests that fit into a prefill batch; True if any moved."""
        if not self.waiting or (self._blocked and self.running):
            return False
        running_before = self.running
        batch, hits = self._take_batch(now)
        if not batch:
            return False
        self._start_prefill(now, batch, hits, running_before)
        return True

    def _started_from_idle(self, now: float) -> None:
        self._window = (now, self.decode_tokens)

    def _on_log_boundary(self) -> None:
        t0, tokens0 = self._window
        span = self._t_base - t0
        if span > 0:
            self._gen_throughput = (self.decode_tokens - tokens0) / span
        self._window = (self._t_base, self.decode_tokens)
        self._gauges.at_decode(self.snapshot(), self._hit_rate)
        log_decode(
            self.model.usage(self.running, self.ctx_tokens), running=self.running, waiting=self.waiting,
            throughput=self._gen_throughput, cuda_graph=cuda_graph(self._pool, self.running),
            hybrid=hybrid_lines(self._pool),
        )  # fmt: skip
