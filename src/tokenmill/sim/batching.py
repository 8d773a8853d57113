"""The scheduler's batch side: the waiting queue, the running set, and SGLang's rules for who joins a prefill
batch (admission: :mod:`tokenmill.planner.admission`, with the new-token ratio) and who goes back to the queue
when a decode step does not fit (retraction, ``retract_decode``).

:class:`Batcher` holds that state and those rules; :class:`~tokenmill.sim.scheduler.Scheduler` adds time: the
event loop that steps decode, prices prefill batches and writes the gauges.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from tokenmill.planner.admission import admission_need, reserve_ratio
from tokenmill.sim.gauges import hybrid_lines, log_retraction
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.requests import KvPolicy, NewTokenRatio, PoolModel, SimRequest, State
from tokenmill.sim.timing import StepModel


class Batcher:
    """Who waits and who runs at the current decode step, and SGLang's admission and retraction rules."""

    def __init__(self, model: StepModel, prefix: PrefixCache | None) -> None:
        self.model = model
        # matched when a request is admitted, filled when its prefill ends and when it finishes (as SGLang's
        # radix cache: requests prefilled together find nothing of each other's prompts)
        self._prefix = prefix
        self._pool: PoolModel | None = model if isinstance(model, PoolModel) else None
        self._kv: KvPolicy | None = self._pool.kv_policy if self._pool is not None else None
        self.step = 0
        self.running = 0
        self.ctx_tokens = 0
        self.waiting = 0
        self.retracted_requests = 0
        self.retracted_input_tokens = 0
        self.retracted_output_tokens = 0
        self._last_retracted = 0
        self._queue: deque[SimRequest] = deque()
        self._heap: list[tuple[int, int, SimRequest]] = []
        self._seq = 0
        self._prefilling: list[SimRequest] = []
        self._first_batch = 0  # how many of _prefilling the batch that started the prefill holds
        self._prefill_start = -math.inf  # when that batch formed
        self._ratio = NewTokenRatio(self._kv)
        # SGLang's batch_is_full: after a request did not fit, no admission is tried until a running request
        # leaves (or, when the failed pass started from an empty batch, until that batch's prefill is done)
        self._blocked = False
        self._blocked_from_idle = False

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

    def _kv_budget(self, now: float | None = None) -> float:
        """Free KV minus what the running requests are expected to still need (``rem_total_tokens``)."""
        p = self._kv
        assert p is not None
        clip, ratio = p.clip_max_new_tokens, self._ratio.at(self.step)
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

    def _take_batch(self, now: float) -> tuple[list[SimRequest], list[int]]:
        """SGLang's ``PrefillAdder``: waiting requests in order while each fits (the step model's caps and, with a
        finite KV pool, the admission rule of :mod:`tokenmill.planner.admission`), started at ``now``; with the
        prompt tokens the prefix cache serves each."""
        running_before = self.running
        # what the running requests leave, before this batch (each request it admits is charged in full); summed
        # over the running requests only once a request passes the step model's caps (a server at its running cap
        # is asked at every arrival)
        budget: float | None = None
        batch: list[SimRequest] = []
        hits: list[int] = []
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
                if budget is None:
                    budget = self._kv_budget(now)
                clip = self._kv.clip_max_new_tokens
                need = admission_need(
                    r.prompt_tokens, r.max_new_tokens, cached_tokens=hit, generated=r.resumed, clip=clip
                )
                if need >= budget and self.running:  # an idle engine takes its first request regardless
                    self._blocked, self._blocked_from_idle = True, running_before == 0
                    break
                budget -= need
            if first:
                r.cached_tokens = hit
            hits.append(hit)
            queue.popleft()
            self._start(r, now, fill)
            batch.append(r)
        return batch, hits

    def _start(self, r: SimRequest, now: float, fill: int) -> None:
        """``r`` leaves the queue and runs: the prefill yields its next token."""
        self.waiting -= 1
        r.state = State.RUNNING
        if math.isnan(r.started):
            r.started = now
        r.admit_step = self.step
        r.finish_step = self.step + max(r.output_tokens - r.resumed, 1) - 1
        self.running += 1
        self.ctx_tokens += fill + 1
        self._seq += 1
        r.seq = self._seq
        heapq.heappush(self._heap, (r.finish_step, r.seq, r))

    def _release(self, r: SimRequest) -> None:
        """Give back a running request's slot and tokens (its prompt and every token it generated); its cached
        prompt stays in the prefix cache, evictable."""
        self.running -= 1
        self.ctx_tokens -= r.prompt_tokens + self._generated(r)
        self._blocked = False  # a request left: admission is tried again
        if self._prefix is not None and r.prompt_ids and r not in self._prefilling:
            self._prefix.unlock(r.prompt_ids)

    def _pop_finished(self, t: float, done: list[SimRequest]) -> None:
        """Running requests whose last step is done by now finish at ``t``: slot freed, answer in the prefix cache."""
        heap = self._heap
        while heap and heap[0][0] <= self.step:
            _, seq, r = heapq.heappop(heap)
            if r.seq != seq or r.state is not State.RUNNING:
                continue
            self._finish(r, t, done)

    def _finish(self, r: SimRequest, t: float, done: list[SimRequest]) -> None:
        """``r`` made its last token at ``t``: its slot is freed, its answer cached with its prompt."""
        r.state = State.DONE
        r.finished = t
        self._release(r)
        if self._prefix is not None and r.prompt_ids:
            self._prefix.insert_finished(r.prompt_ids, r.output_ids)
        done.append(r)

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
        old = self._ratio.at(self.step)
        decoded = sum(self._generated(r) for r in live)
        limit = sum(r.max_new_tokens for r in live)
        self._ratio.set(min(1.0, (decoded + p.retract_decode_steps * len(live)) / (limit + 1)), self.step)
        after = self.model.usage(self.running, self.ctx_tokens)
        new = self._ratio.at(self.step)
        log_retraction(before, after, retracted=retracted, old=old, new=new, hybrid=hybrid_lines(self._pool))
