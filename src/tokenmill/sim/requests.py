"""What the simulated scheduler works on: a request's life, SGLang's KV admission policy and its new-token ratio,
and the finite pools a twin's step model adds."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from tokenmill.sim.timing import StepModel


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

    def prefill_batch_time_s(self, fill_tokens: Sequence[int], read_tokens: int = 0) -> float:
        """Seconds to prefill one batch whose requests prefill ``fill_tokens`` tokens each, reading ``read_tokens``
        tokens of KV besides (the decode rows of a mixed batch, one fill token each)."""
        ...

    @property
    def mixed_chunk(self) -> bool:
        """``--enable-mixed-chunk``: running requests decode in the prefill batches (with chunked prefill)."""
        ...

    @property
    def chunked_prefill_size(self) -> int | None:
        """``--chunked-prefill-size``: prompt tokens per prefill batch (None: no chunking)."""
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


class NewTokenRatio:
    """SGLang's ``new_token_ratio``: set at a step (``init_ratio`` when the engine idles, an estimate after a
    retraction), then falling by :attr:`KvPolicy.decay` per decode step down to ``min_ratio``; 0 without a policy
    (no finite KV pool)."""

    def __init__(self, policy: KvPolicy | None) -> None:
        self.policy = policy
        self.base = policy.init_ratio if policy is not None else 0.0
        self.since = 0  # the step at which it was last set

    def at(self, step: int) -> float:
        p = self.policy
        if p is None:
            return 0.0
        return max(p.min_ratio, self.base - p.decay * (step - self.since))

    def set(self, value: float, step: int) -> None:
        self.base, self.since = value, step
