"""The scheduler's prefill side: a prefill is one or more prefill batches, decode paused while they run.

The prompts admitted together are computed ``--chunked-prefill-size`` tokens at a time (:mod:`tokenmill.sim.chunks`),
one priced prefill batch and one log line per chunk; requests admitted while a prefill runs are computed in the
batches that follow. A prefill that starts while requests decode keeps the progress of the decode step it
interrupted, so no decode time is lost or counted twice. When a batch ends, the prompts it completed have their first
token and are in the prefix cache (SGLang's radix tree is filled after a prefill: requests prefilled together find
nothing of each other's prompts). :class:`~tokenmill.sim.scheduler.Scheduler` adds the decode steps and the driving.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod

from tokenmill.sim.batching import Batcher
from tokenmill.sim.chunks import ChunkQueue
from tokenmill.sim.gauges import Gauges, SchedulerSnapshot, hybrid_lines, log_prefill
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.requests import SimRequest, State
from tokenmill.sim.timing import StepModel


class PrefillPhase(Batcher, ABC):
    """Prefill batches: their queue of chunks, their price, and what their end hands to decode."""

    def __init__(self, model: StepModel, prefix: PrefixCache | None, time_scale: float) -> None:
        super().__init__(model, prefix)
        self._scale = time_scale
        self.decode_tokens = 0  # made by decode steps and by the decode rows of mixed batches
        self.prefill_tokens = 0
        self.prefill_cache_tokens = 0
        self._t_base = 0.0  # when the current decode step began
        self._prefill_end: float | None = None
        self._partial = 0.0  # progress into the decode step a prefill interrupted
        self._last_prefill_at = 0.0
        self._hit_rate = 0.0
        self._gauges = Gauges()  # the gauges as last written (SGLang's stats)
        self._chunks = ChunkQueue(self._pool.chunked_prefill_size if self._pool is not None else None)
        self._chunk_completed: list[SimRequest] = []  # the prompts the prefill batch under way completes
        # --enable-mixed-chunk (SGLang's is_mixed_chunk: only with chunked prefill): the requests whose prompt is
        # done decode one token in each prefill batch; _chunk_rows are those of the batch under way
        self._mixed = self._pool is not None and self._pool.mixed_chunk and self._chunks.size is not None
        self._chunk_rows: list[SimRequest] = []

    @abstractmethod
    def snapshot(self, decoded_since: int = 0) -> SchedulerSnapshot:
        """The scheduler's state (the gauges a prefill batch writes)."""

    @abstractmethod
    def _started_from_idle(self, now: float) -> None:
        """A prefill starts in an engine where nothing ran: idle time is not part of the decode throughput."""

    def _start_prefill(self, now: float, batch: list[SimRequest], cached: list[int], running_before: int) -> None:
        """Queue ``batch``'s prompts for prefill and pause decode for it; a prefill under way computes them in the
        chunks that follow its own (:mod:`tokenmill.sim.chunks`)."""
        fills = [r.prompt_tokens + r.resumed - c for r, c in zip(batch, cached, strict=True)]
        for r, fill, c in zip(batch, fills, cached, strict=True):
            self._chunks.add(r, fill, c)
        new_tokens = sum(fills)
        self.prefill_tokens += new_tokens
        self.prefill_cache_tokens += sum(cached)
        total = new_tokens + sum(cached)
        self._hit_rate = sum(cached) / total if total else 0.0
        if not self._prefilling:
            self._first_batch, self._prefill_start = len(batch), now
        self._prefilling.extend(batch)
        if self._prefill_end is not None:
            return
        if running_before:
            self._partial = max(0.0, now - self._t_base)
        else:
            self._partial = 0.0
            self._started_from_idle(now)
        self._run_chunk(now)

    def _run_chunk(self, now: float) -> None:
        """Start the next prefill batch of the chunk queue at ``now``: priced on its own (with its decode rows, in a
        mixed batch); gauges and log line."""
        rows = self._decode_rows()
        chunk = self._chunks.next(len(rows))
        if self._pool is not None:
            read = sum(r.prompt_tokens + self._generated(r) for r in rows)  # the decode rows' KV, read
            cost = self._pool.prefill_batch_time_s([*chunk.fills, *([1] * len(rows))], read) * self._scale
        else:
            cost = self.model.prefill_time_s(sum(chunk.fills)) * self._scale
        self._prefill_end = now + cost
        self._chunk_completed = chunk.completed
        self._chunk_rows = rows
        running = self.running - len(self._prefilling)
        self._gauges.at_prefill(self.snapshot(), running)
        gap, self._last_prefill_at = now - self._last_prefill_at, now
        usage = self.model.usage(self.running, self.ctx_tokens)
        log_prefill(
            usage, batch=len(chunk.fills), new_tokens=sum(chunk.fills), cached_tokens=chunk.cached,
            running=running, waiting=self.waiting, gap_s=gap, hybrid=hybrid_lines(self._pool),
        )  # fmt: skip

    def _end_prefill(self, done: list[SimRequest]) -> None:
        """The prefill batch under way ends: its completed requests have their first token and their prompt in the
        prefix cache; the next chunk starts, or (none left) decode resumes."""
        assert self._prefill_end is not None
        t = self._prefill_end
        for r in self._chunk_completed:
            if math.isnan(r.first_token):
                r.first_token = t
            if self._prefix is not None and r.prompt_ids and r.state is State.RUNNING:
                self._prefix.insert_prompt(r.prompt_ids)
                self._prefix.lock(r.prompt_ids)
        if self._chunk_rows:
            self._mixed_step(t, done)
        self._chunk_completed = []
        if self._chunks:
            self._run_chunk(t)
            return
        self._prefill_end = None
        self._t_base = t - self._partial
        self._partial = 0.0
        if self._blocked_from_idle:  # the batch admitted into an empty engine becomes the running batch
            self._blocked = self._blocked_from_idle = False
        self._prefilling.clear()
        self._pop_finished(t, done)

    def _decode_rows(self) -> list[SimRequest]:
        """The running requests that decode in the next prefill batch: with ``--enable-mixed-chunk``, every one whose
        prompt is done, when the KV pool holds their next tokens (else they sit the batch out, as in SGLang)."""
        if not self._mixed:
            return []
        pending = self._chunks.pending()
        rows = [r for r in self._live() if id(r) not in pending]
        return rows if self._kv_free() >= len(rows) else []

    def _mixed_step(self, t: float, done: list[SimRequest]) -> None:
        """The decode rows of the mixed batch that ended at ``t`` made a token each: the decode step counter moves
        on one step; the requests still prefilling made none (their steps are shifted by one); rows and prompts
        completed here that made their last token finish."""
        rows = {id(r) for r in self._chunk_rows}
        self._chunk_rows = []
        self.step += 1
        made = 0
        for r in self._live():
            if id(r) in rows:
                made += 1
                continue
            r.admit_step += 1
            r.finish_step += 1
            self._seq += 1
            r.seq = self._seq
            heapq.heappush(self._heap, (r.finish_step, r.seq, r))
        self.ctx_tokens += made
        self.decode_tokens += made
        for r in self._live():
            if r.finish_step <= self.step and (id(r) in rows or r in self._chunk_completed):
                self._finish(r, t, done)
