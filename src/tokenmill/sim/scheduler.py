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

A prefill that starts while requests are decoding keeps the progress of the step it interrupted, so no
decode time is lost or counted twice; requests admitted while a prefill runs join it and extend it.

With a :class:`PoolModel` (the twin) the KV pool is finite, as in SGLang: admission also keeps room for the
running requests' future tokens (scaled by the new-token ratio, :class:`KvPolicy`), and when a decode step
would need more KV than is free, running requests are retracted back to the queue. A retracted request
keeps the tokens it generated, but its KV is gone: when admitted again it prefills its prompt plus those
tokens, and then continues.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol, runtime_checkable

from tokenmill.planner.admission import admission_need, reserve_ratio
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.timing import PoolUsage, StepModel

log = logging.getLogger(__name__)

_EPS = 1e-6  # in steps: absorbs float error when a wake-up lands exactly on a step boundary


class QueueFullError(Exception):
    """The waiting queue already holds ``max_queued_requests`` requests."""


class State(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class KvPolicy:
    """SGLang's KV admission reserve and retraction rule, with SGLang's constants supplied by the caller.

    * Admission (``PrefillAdder``): the free KV minus ``ratio * min(max_new - generated, clip)`` for each
      running request (ratio 1 for an ``ignore_eos`` request: it cannot stop early) must exceed a new
      request's ``fill + min(max_new - generated, clip)`` plus one page; each admitted request is then charged
      that much (:mod:`tokenmill.planner.admission` is the rule's one statement).
    * The ratio (``new_token_ratio``) starts at ``init_ratio``, falls by ``(init_ratio - min_ratio) /
      decay_steps`` per decode step down to ``min_ratio``, and is back at ``init_ratio`` when the engine idles.
    * Retraction (``retract_decode``): when the next decode step needs more KV than is free, the request with
      the fewest generated tokens (then the longest prompt) goes back to the queue, and so on until the step
      fits, keeping at least one; the ratio becomes ``(generated + retract_decode_steps * n) / (max_new + 1)``
      over the n requests left, at most 1.
    """

    init_ratio: float
    min_ratio: float
    decay_steps: int
    clip_max_new_tokens: int
    retract_decode_steps: int

    @property
    def decay(self) -> float:
        """Ratio lost per decode step."""
        return (self.init_ratio - self.min_ratio) / self.decay_steps


@runtime_checkable
class PoolModel(StepModel, Protocol):
    """A :class:`StepModel` with SGLang's finite pools (the twin): the scheduler then reserves future KV,
    retracts when a decode step does not fit, prices a prefill batch request by request, and writes the log
    lines of the model's kind (hybrid or plain)."""

    @property
    def kv_policy(self) -> KvPolicy: ...

    @property
    def is_hybrid(self) -> bool:
        """Whether the model has recurrent state (SGLang's hybrid log format with ``mamba usage``)."""
        ...

    @property
    def cuda_graph_max_bs(self) -> int:
        """Decode batches up to this size run with CUDA graphs (the ``cuda graph`` field of the log)."""
        ...

    def prefill_batch_time_s(self, fill_tokens: Sequence[int]) -> float:
        """Seconds to prefill one batch whose requests prefill ``fill_tokens`` tokens each."""
        ...


@dataclass(eq=False, slots=True)
class SimRequest:
    """One generation in the scheduler; times are on the caller's clock."""

    prompt_tokens: int
    output_tokens: int
    arrived: float
    max_new_tokens: int = 0  # the request's limit (what admission reserves for); below output_tokens: that
    started: float = math.nan
    first_token: float = math.nan
    finished: float = math.nan
    admit_step: int = 0
    finish_step: int = 0
    resumed: int = 0  # tokens generated before the current admission (kept across a retraction)
    cached_tokens: int = 0  # prompt tokens the prefix cache serves at the first admission
    ignore_eos: bool = False  # admission reserves its whole remaining output (SGLang's ratio 1)
    prompt_ids: Sequence[int] = ()  # matched against the prefix cache at admission, inserted after prefill
    output_ids: Sequence[int] = ()  # inserted into the prefix cache with the prompt when the request finishes
    retractions: int = 0
    seq: int = 0  # identifies the request's live heap entry
    state: State = State.WAITING
    waiter: asyncio.Future[None] | None = None  # owned by the async driver


@dataclass(frozen=True, slots=True)
class Timing:
    """Where one request's time went, in seconds."""

    queue_s: float
    ttft_s: float
    e2e_s: float
    retractions: int = 0  # times the server took the request back to its queue (KV ran out)
    cached_tokens: int = 0  # prompt tokens the prefix cache served


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
    prefill_cache_tokens: int = 0
    retracted_requests: int = 0
    retracted_input_tokens: int = 0
    retracted_output_tokens: int = 0
    last_retracted: int = 0  # requests retracted by the latest retraction
    new_token_ratio: float = 0.0
    cuda_graph: bool = True
    kv_evictable_tokens: int = 0  # cached tokens no running request holds (free for admission)
    cache_hit_rate: float = 0.0  # of the last prefill batch: cached / (cached + computed) prompt tokens


class Scheduler:
    """FIFO admission up to the step model's capacity, decode steps timed by the step model."""

    def __init__(
        self,
        model: StepModel,
        *,
        time_scale: float,
        max_queued: int | None,
        log_interval: int,
        prefix: PrefixCache | None = None,
    ) -> None:
        self.model = model
        # matched when a request is admitted, filled when its prefill ends and when it finishes (as SGLang's
        # radix cache: requests prefilled together find nothing of each other's prompts)
        self._prefix = prefix
        self._pool: PoolModel | None = model if isinstance(model, PoolModel) else None
        self._kv: KvPolicy | None = self._pool.kv_policy if self._pool is not None else None
        self._scale = time_scale
        self._max_queued = max_queued
        self._interval = log_interval
        self.step = 0
        self.running = 0
        self.ctx_tokens = 0
        self.waiting = 0
        self.decode_tokens = 0
        self.prefill_tokens = 0
        self.prefill_cache_tokens = 0
        self.retracted_requests = 0
        self.retracted_input_tokens = 0
        self.retracted_output_tokens = 0
        self._last_retracted = 0
        self._queue: deque[SimRequest] = deque()
        self._heap: list[tuple[int, int, SimRequest]] = []
        self._seq = 0
        self._t_base = 0.0  # when the current decode step began
        self._prefill_end: float | None = None
        self._partial = 0.0  # progress into the decode step a prefill interrupted
        self._prefilling: list[SimRequest] = []
        self._first_batch = 0  # how many of _prefilling the batch that started the prefill holds
        self._prefill_start = -math.inf  # when that batch formed
        self._paused_at: float | None = None
        self._gen_throughput = 0.0
        self._window = (0.0, 0)  # (time, decode_tokens) at the last log boundary
        self._last_prefill_at = 0.0
        self._ratio_base = self._kv.init_ratio if self._kv is not None else 0.0
        self._ratio_step = 0  # the step at which the ratio was last set
        self._hit_rate = 0.0
        # SGLang's batch_is_full: after a request did not fit, no admission is tried until a running request
        # leaves (or, when the failed pass started from an empty batch, until that batch's prefill is done)
        self._blocked = False
        self._blocked_from_idle = False
        self._published: SchedulerSnapshot | None = None  # the gauges as last written (SGLang's stats)

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
        req.max_new_tokens = max(req.max_new_tokens, req.output_tokens)
        done = self.advance(now)  # events before the arrival must not see the new request
        if self._kv is not None and not self.running and not self.waiting and self._prefill_end is None:
            # SGLang re-inits the ratio when its scheduler idles, not when a queue is waiting for the next batch
            self._ratio_base, self._ratio_step = self._kv.init_ratio, self.step
        self._queue.append(req)
        self.waiting += 1
        done.extend(self.advance(now))
        return done

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
            prefill_cache_tokens=self.prefill_cache_tokens,
            paused=self._paused_at is not None,
            retracted_requests=self.retracted_requests,
            retracted_input_tokens=self.retracted_input_tokens,
            retracted_output_tokens=self.retracted_output_tokens,
            last_retracted=self._last_retracted,
            new_token_ratio=self._ratio(),
            cuda_graph=self._cuda_graph(),
            kv_evictable_tokens=self._evictable(),
            cache_hit_rate=self._hit_rate,
        )

    def published(self) -> SchedulerSnapshot:
        """What a ``/metrics`` scrape sees: counters as of now, gauges as SGLang last wrote them: at each prefill
        batch (running before the batch, queue, pools, new-token ratio, the batch's hit rate) and every
        ``log_interval`` decode steps (running, queue, pools, sequence lengths, throughput); an engine with
        nothing running or waiting shows its idle state (SGLang writes it as soon as its gauge is stale). Only
        the twin (a :class:`PoolModel`) does this; the plain simulator shows its live state."""
        live = self.snapshot()
        pub = self._published
        if self._pool is None or pub is None or (not self.running and not self.waiting and self._prefill_end is None):
            return live  # the plain simulator (no SGLang pools) shows its live state
        return replace(
            pub,
            decode_tokens=live.decode_tokens,
            prefill_tokens=live.prefill_tokens,
            prefill_cache_tokens=live.prefill_cache_tokens,
            retracted_requests=live.retracted_requests,
            retracted_input_tokens=live.retracted_input_tokens,
            retracted_output_tokens=live.retracted_output_tokens,
            paused=live.paused,
        )

    def _publish(self, *, running: int | None = None, decode: bool) -> None:
        live = self.snapshot()
        pub = self._published
        if decode:
            ratio = pub.new_token_ratio if pub is not None else live.new_token_ratio  # written at prefill only
            self._published = replace(live, new_token_ratio=ratio, cache_hit_rate=self._hit_rate)
        else:
            seq = pub.ctx_tokens if pub is not None else 0  # decode_sum_seq_lens: written at decode only
            self._published = replace(live, running=self.running if running is None else running, ctx_tokens=seq)

    def _evictable(self) -> int:
        if self._prefix is None:
            return 0
        return min(self._prefix.evictable_tokens, max(0, self.model.max_total_tokens - self.ctx_tokens))

    # ---- internals -----------------------------------------------------------------------------------

    def _step_dt(self) -> float:
        return self.model.step_time_s(self.running, self.ctx_tokens) * self._scale

    def _live(self) -> list[SimRequest]:
        """The running requests (each heap entry that is its request's current one)."""
        return [r for _, seq, r in self._heap if r.seq == seq and r.state is State.RUNNING]

    def _generated(self, r: SimRequest) -> int:
        """Tokens a running request has produced so far (its prefill made one)."""
        return r.resumed + 1 + (self.step - r.admit_step)

    def _kv_free(self) -> int:
        return self.model.max_total_tokens - self.ctx_tokens

    def _must_retract(self) -> bool:
        """A finite KV pool cannot hold the next decode step's tokens (one per running request)."""
        return self._kv is not None and self.running > 1 and self._kv_free() < self.running

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

    def _end_prefill(self, done: list[SimRequest]) -> None:
        assert self._prefill_end is not None
        t = self._prefill_end
        self._prefill_end = None
        self._t_base = t - self._partial
        self._partial = 0.0
        if self._blocked_from_idle:  # the batch admitted into an empty engine becomes the running batch
            self._blocked = self._blocked_from_idle = False
        for r in self._prefilling:
            if math.isnan(r.first_token):
                r.first_token = t
            if self._prefix is not None and r.prompt_ids and r.state is State.RUNNING:
                self._prefix.insert_prompt(r.prompt_ids)
                self._prefix.lock(r.prompt_ids)
        self._prefilling.clear()
        self._pop_finished(t, done)

    def _pop_finished(self, t: float, done: list[SimRequest]) -> None:
        heap = self._heap
        while heap and heap[0][0] <= self.step:
            _, seq, r = heapq.heappop(heap)
            if r.seq != seq or r.state is not State.RUNNING:
                continue
            r.state = State.DONE
            r.finished = t
            self._release(r)
            if self._prefix is not None and r.prompt_ids:
                self._prefix.insert_finished(r.prompt_ids, r.output_ids)
            done.append(r)

    def _release(self, r: SimRequest) -> None:
        """Give back a running request's slot and tokens (its prompt and every token it generated); its cached
        prompt stays in the prefix cache, evictable."""
        self.running -= 1
        self.ctx_tokens -= r.prompt_tokens + self._generated(r)
        self._blocked = False  # a request left: admission is tried again
        if self._prefix is not None and r.prompt_ids and r not in self._prefilling:
            self._prefix.unlock(r.prompt_ids)

    def _ratio(self) -> float:
        """SGLang's new-token ratio now (0 without a finite KV pool)."""
        p = self._kv
        if p is None:
            return 0.0
        return max(p.min_ratio, self._ratio_base - p.decay * (self.step - self._ratio_step))

    def _kv_budget(self, now: float | None = None) -> float:
        """Free KV minus what the running requests are expected to still need (``rem_total_tokens``)."""
        p = self._kv
        assert p is not None
        clip, ratio = p.clip_max_new_tokens, self._ratio()
        # requests that joined the prefill under way would form SGLang's next batch with this one, and requests
        # arriving at the instant a batch formed would be in it: charged in full
        first = 0 if now is not None and now <= self._prefill_start else self._first_batch
        joined = {id(r) for r in self._prefilling[first:]}
        reserve = sum(
            min(r.max_new_tokens - self._generated(r), clip)
            * reserve_ratio(1.0 if id(r) in joined else ratio, r.ignore_eos)
            for r in self._live()
        )
        return self._kv_free() - reserve

    def _admit(self, now: float) -> bool:
        """Move waiting requests that fit into a prefill batch; True if any moved."""
        if not self.waiting or (self._blocked and self.running):
            return False
        running_before = self.running
        # what the running requests leave, before this batch (each request it admits is charged in full)
        budget = self._kv_budget(now) if self._kv is not None else 0.0
        batch: list[SimRequest] = []
        hits: list[int] = []  # prompt tokens the prefix cache serves each admitted request
        queue = self._queue
        while queue:
            r = queue[0]
            if r.state is not State.WAITING:
                queue.popleft()
                continue
            fill = r.prompt_tokens + r.resumed
            if not self.model.admit(self.running, self.ctx_tokens, fill):
                break
            first = not r.resumed and not r.retractions
            if self._prefix is not None and r.prompt_ids:
                # a retracted request finds its own prompt still cached (its output was never inserted)
                hit = self._prefix.match(r.prompt_ids)
            else:
                hit = r.cached_tokens if first else 0  # what the caller says the cache served
            if self._kv is not None:
                need = admission_need(
                    r.prompt_tokens,
                    r.max_new_tokens,
                    cached_tokens=hit,
                    generated=r.resumed,
                    clip=self._kv.clip_max_new_tokens,
                )
                if need >= budget and self.running:  # an idle engine takes its first request regardless
                    self._blocked, self._blocked_from_idle = True, running_before == 0
                    break
                budget -= need
            if first:
                r.cached_tokens = hit
            hits.append(hit)
            queue.popleft()
            self.waiting -= 1
            r.state = State.RUNNING
            if math.isnan(r.started):
                r.started = now
            r.admit_step = self.step
            r.finish_step = self.step + max(r.output_tokens - r.resumed, 1) - 1
            self.running += 1
            self.ctx_tokens += fill + 1  # the prefill yields the next token
            self._seq += 1
            r.seq = self._seq
            heapq.heappush(self._heap, (r.finish_step, r.seq, r))
            batch.append(r)
        if not batch:
            return False
        cached = hits
        fills = [r.prompt_tokens + r.resumed - c for r, c in zip(batch, cached, strict=True)]
        new_tokens = sum(fills)
        if self._pool is not None:
            cost = self._pool.prefill_batch_time_s(fills) * self._scale
        else:
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
        if not self._prefilling:
            self._first_batch, self._prefill_start = len(batch), now
        self._prefilling.extend(batch)
        self.prefill_tokens += new_tokens
        self.prefill_cache_tokens += sum(cached)
        total = new_tokens + sum(cached)
        self._hit_rate = sum(cached) / total if total else 0.0
        self._publish(running=running_before, decode=False)
        self._log_prefill(now, len(batch), new_tokens, sum(cached))
        return True

    def _retract(self) -> None:
        """SGLang's ``retract_decode``: back to the queue, fewest generated tokens first, until the step fits."""
        p = self._kv
        assert p is not None
        live = self._live()
        # SGLang sorts by (generated, -prompt) descending and retracts from the end of the list
        live.sort(key=lambda r: (self._generated(r), -r.prompt_tokens), reverse=True)
        before = self.model.usage(self.running, self.ctx_tokens)
        retracted = 0
        while len(live) > 1 and (retracted == 0 or self._kv_free() < len(live)):
            r = live.pop()
            generated = self._generated(r)
            self._release(r)
            r.state = State.WAITING
            r.resumed = generated
            r.retractions += 1
            self._queue.append(r)
            self.waiting += 1
            retracted += 1
            self.retracted_input_tokens += r.prompt_tokens
            self.retracted_output_tokens += generated
        self.retracted_requests += retracted
        self._last_retracted = retracted
        old = self._ratio()
        decoded = sum(self._generated(r) for r in live)
        limit = sum(r.max_new_tokens for r in live)
        self._ratio_base = min(1.0, (decoded + p.retract_decode_steps * len(live)) / (limit + 1))
        self._ratio_step = self.step
        if log.isEnabledFor(logging.WARNING):
            after = self.model.usage(self.running, self.ctx_tokens)
            mamba = f"#mamba_num_gained: {before.mamba_used - after.mamba_used}, " if self._hybrid() else ""
            log.warning(
                "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_tokens_gained: %d, "
                "%s#new_token_ratio: %.4f -> %.4f",
                retracted,
                before.used_tokens - after.used_tokens,
                mamba,
                old,
                self._ratio(),
            )

    def _cuda_graph(self) -> bool:
        return self._pool is None or self.running <= self._pool.cuda_graph_max_bs

    def _hybrid(self) -> bool:
        return self._pool is None or self._pool.is_hybrid

    def _on_log_boundary(self) -> None:
        t0, tokens0 = self._window
        span = self._t_base - t0
        if span > 0:
            self._gen_throughput = (self.decode_tokens - tokens0) / span
        self._window = (self._t_base, self.decode_tokens)
        self._publish(decode=True)
        if not log.isEnabledFor(logging.INFO):
            return
        u = self.model.usage(self.running, self.ctx_tokens)
        if self._hybrid():
            log.info(
                "Decode batch, #running-req: %d, #full token: %d, full token usage: %.2f, mamba num: %d, "
                "mamba usage: %.2f, cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d",
                self.running,
                u.used_tokens,
                u.full_token_usage,
                u.mamba_used,
                u.mamba_usage,
                self._cuda_graph(),
                self._gen_throughput,
                self.waiting,
            )
        else:
            log.info(
                "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
                "gen throughput (token/s): %.2f, #queue-req: %d",
                self.running,
                u.used_tokens,
                u.token_usage,
                self._cuda_graph(),
                self._gen_throughput,
                self.waiting,
            )

    def _log_prefill(self, now: float, n: int, new_tokens: int, cached_tokens: int) -> None:
        gap = now - self._last_prefill_at
        self._last_prefill_at = now
        if not log.isEnabledFor(logging.INFO):
            return
        u = self.model.usage(self.running, self.ctx_tokens)
        usage = (
            f"full token usage: {u.full_token_usage:.2f}, mamba usage: {u.mamba_usage:.2f}"
            if self._hybrid()
            else f"token usage: {u.token_usage:.2f}"
        )
        log.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s, #running-req: %d, "
            "#queue-req: %d, #pending-token: 0, cuda graph: False, input throughput (token/s): %.2f",
            n,
            new_tokens,
            cached_tokens,
            usage,
            self.running - n,
            self.waiting,
            new_tokens / gap if gap > 0 else 0.0,
        )
