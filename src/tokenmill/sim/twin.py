"""The twin: the simulated server's physics taken from the capacity planner, for one (model, GPU, flags).

:class:`TwinStepModel` turns a :class:`~tokenmill.planner.ServerCapacity` into the simulator's
:class:`~tokenmill.sim.timing.StepModel` (and the scheduler's :class:`~tokenmill.sim.scheduler.PoolModel`):

* **Pools**: ``max_running_requests``, the KV pool (``max_total_num_tokens``) and the Mamba state pool
  (``max_mamba_cache_size``) exactly as the planner sizes them from SGLang's own rules.
* **Admission**: a request starts when fewer than ``max_running`` run, its state slots are free, its prompt
  fits in the free KV, and the KV left after SGLang's reserve for future tokens holds it (the reserve and
  its new-token ratio are the scheduler's :class:`~tokenmill.sim.scheduler.KvPolicy`, with SGLang's
  constants below and ``--schedule-conservativeness``).
* **State slots held** by a running request: 1 working slot, plus, with the radix cache, the state cached
  at the end of its prompt, locked while it runs (``no_buffer``: 2 in all, as a real 0.5.23 server shows),
  or the ping-pong track slots of ``extra_buffer`` (2 with the overlap scheduler, 1 without;
  ``extra_buffer_lazy`` 1; not checked on a real server: extra_buffer needs a GPU). The rest of the ``S``
  slots SGLang sets aside per request (``max_running = slots // S``) hold radix-cached states, which are
  evictable and so not "used": ``mamba_usage = running * held / slots``, as SGLang's
  ``(size - free - evictable) / size``; the evictable ones are the states the prefix cache keeps.
* **Usage**: ``full_token_usage = KV tokens held / KV pool``; ``token_usage`` is the fuller of the KV and
  Mamba pools (SGLang's gauge since PR #22554; before it, the KV pool alone).
* **Time**: a decode step is the planner's roofline ``step_time_s(running, tokens held)``; a prefill batch
  reads the weights once and computes each request's prompt (``prefill_compute_s`` per request, the same
  cost the planner's prefill dilution uses), plus the fixed per-step cost.

* **Prefix cache**: with the radix cache on, prompts are served their cached prefix as SGLang serves them
  (:mod:`tokenmill.sim.prefix`); a prefill computes only the rest.

* **Chunked prefill**: a prefill batch is computed ``--chunked-prefill-size`` tokens at a time (SGLang's default
  for the GPU's memory when not given), one priced prefill batch and one log line per chunk
  (:mod:`tokenmill.sim.chunks`).

* **Mixed batches** (``--enable-mixed-chunk``, off by default in SGLang; with chunked prefill): the running requests
  whose prompt is done decode one token in each prefill batch, taking one token each of its chunk budget; the batch
  reads their KV besides (:mod:`tokenmill.sim.prefill`). Without the flag a prefill batch pauses decode.

Not modeled: ``--max-prefill-tokens`` without chunking, speculative decoding, the slower decode of batches above
``--cuda-graph-max-bs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.config import SimSpec
from tokenmill.errors import ConfigError
from tokenmill.planner import ServerCapacity, parse_flags, server_capacity
from tokenmill.planner.admission import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO_FACTOR,
    NEW_TOKEN_RATIO_DECAY_STEPS,
    schedule_conservativeness,
)
from tokenmill.planner.reserve import auto_chunked_prefill_size, auto_cuda_graph_max_bs
from tokenmill.planner.roofline import fixed_time
from tokenmill.planner.strategy import PING_PONG_SLOTS_LAZY, PING_PONG_SLOTS_NO_OVERLAP, PING_PONG_SLOTS_OVERLAP
from tokenmill.sim.scheduler import KvPolicy
from tokenmill.sim.timing import PoolUsage

# SGLang's scheduler constants (environment variables of sglang/srt/environ.py, unchanged from v0.5 to 2026); the
# admission ones are planner.admission's
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
MAX_REQ_INPUT_MARGIN = 5  # max_req_input_len = max_req_len - 5
MIXED_CHUNK_FLAG = "--enable-mixed-chunk"  # not a planner flag: the twin's scheduler alone reads it

# SimSpec fields that are SGLang flags too: given to the twin, they mean the flag
_SHARED_FIELDS = (
    ("max_running_requests", "max_running_requests", "--max-running-requests"),
    ("max_total_tokens", "max_total_tokens", "--max-total-tokens"),
    ("context_length", "context_length", "--context-length"),
)


def kv_policy(conservativeness: float = 1.0) -> KvPolicy:
    """SGLang's new-token ratio and retraction constants for ``--schedule-conservativeness``."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    return KvPolicy(
        init_ratio=init,
        min_ratio=min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0),
        decay_steps=NEW_TOKEN_RATIO_DECAY_STEPS,
        clip_max_new_tokens=CLIP_MAX_NEW_TOKENS,
        retract_decode_steps=RETRACT_DECODE_STEPS,
    )


def held_slots_per_request(capacity: ServerCapacity) -> int:
    """State slots one running request holds itself (working + track buffers), 0 without recurrent state."""
    if not capacity.model.is_hybrid:
        return 0
    strategy = capacity.pools.strategy
    if strategy.strategy == "extra_buffer_lazy":
        return 1 + PING_PONG_SLOTS_LAZY
    if strategy.strategy == "extra_buffer":
        overlap = strategy.overlap and not capacity.flags.speculative_algorithm
        return 1 + (PING_PONG_SLOTS_OVERLAP if overlap else PING_PONG_SLOTS_NO_OVERLAP)
    if strategy.radix_cache:
        return 2  # no_buffer: the working slot and the prompt's cached state, locked while the request runs
    return 1  # no radix cache: the working slot


def flag_slowdown(cfg: SimSpec) -> float:
    """The decode slowdown ``cfg.flag_slowdown`` ('FLAG=FACTOR') injects: FACTOR when the twin runs with FLAG."""
    if not cfg.flag_slowdown:
        return 1.0
    flag, _, raw = cfg.flag_slowdown.partition("=")
    name = flag.strip().lstrip("-")
    try:
        factor = float(raw)
    except ValueError:
        factor = 0.0
    if not name or factor <= 0:
        raise ConfigError(
            f"flag_slowdown {cfg.flag_slowdown!r}: write FLAG=FACTOR with a positive factor, e.g. disable-radix-cache=3"
        )
    words = [w.split("=", 1)[0].lstrip("-") for w in cfg.engine_flags.split() if w.startswith("--")]
    shared = [f.replace("_", "-") for f, _, _ in _SHARED_FIELDS if f in cfg.model_fields_set]
    return factor if name in words or name in shared else 1.0


class TwinStepModel:
    """Capacity and timing of one SGLang server replica as the planner predicts it (see the module doc)."""

    def __init__(self, capacity: ServerCapacity, slowdown: float = 1.0) -> None:
        self.capacity = capacity
        self.slowdown = slowdown  # fault injection: decode steps take this many times the planner's
        pools = capacity.pools
        self.conservativeness, unmodeled = schedule_conservativeness(capacity.flags)
        self.unmodeled_flags = tuple(f for f in unmodeled if f != MIXED_CHUNK_FLAG)
        # SGLang's is_mixed_chunk: the flag, and chunked prefill on
        self.mixed_chunk = MIXED_CHUNK_FLAG in unmodeled and self.chunked_prefill_size is not None
        self._policy = kv_policy(self.conservativeness)
        self._max_running = pools.max_running
        self._kv_tokens = pools.kv_tokens
        self._slots = pools.mamba_slots
        self.held_slots = held_slots_per_request(capacity)
        self._graph_bs = capacity.flags.cuda_graph_max_bs or auto_cuda_graph_max_bs(
            capacity.gpu.memory_mib, capacity.flags.tp_size
        )

    @classmethod
    def from_config(cls, cfg: SimSpec) -> TwinStepModel:
        """The twin ``cfg`` asks for (``cfg.gpu`` set): model ``model_spec`` (else ``model``), its engine flags
        plus the SimSpec fields that are SGLang flags too, when given (``max_running_requests``,
        ``max_total_tokens``, ``context_length``). Raises ConfigError with what to change."""
        if cfg.gpu is None:
            raise ConfigError("the twin needs a GPU: give --gpu (e.g. rtx-pro-6000; see `tokenmill plan --list-gpus`)")
        flags = parse_flags(cfg.engine_flags)
        for field, attr, flag in _SHARED_FIELDS:
            if field not in cfg.model_fields_set:
                continue
            value, current = getattr(cfg, field), getattr(flags, attr)
            if current is not None and current != value:
                raise ConfigError(
                    f"--{field.replace('_', '-')} {value} and {flag} {current} in the engine flags disagree; "
                    "give the value once"
                )
            flags = flags.with_(**{attr: value})
        model = cfg.model_spec or cfg.model
        try:
            capacity = server_capacity(model, cfg.gpu, flags, eta=cfg.eta_bw)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot build the twin of {model} on {cfg.gpu}: {exc} "
                "(the twin's model is --model-spec, else --model: a bundled planner model or a config.json path)"
            ) from exc
        return cls(capacity, flag_slowdown(cfg))

    # ---- StepModel -----------------------------------------------------------------------------------

    @property
    def max_running_requests(self) -> int:
        return self._max_running

    @property
    def max_total_tokens(self) -> int:
        return self._kv_tokens

    @property
    def mamba_slots(self) -> int:
        return self._slots

    def step_time_s(self, running: int, ctx_tokens: int) -> float:
        return self.capacity.step_time_s(running, ctx_tokens) * self.slowdown

    def prefill_time_s(self, new_tokens: int) -> float:
        return self.prefill_batch_time_s([new_tokens])

    def admit(self, running: int, ctx_tokens: int, new_tokens: int) -> bool:
        if running >= self._max_running:
            return False
        if self.held_slots and (running + 1) * self.held_slots > self._slots:
            return False
        return ctx_tokens + new_tokens <= self._kv_tokens

    def usage(self, running: int, ctx_tokens: int) -> PoolUsage:
        full = min(1.0, ctx_tokens / self._kv_tokens)
        held = running * self.held_slots
        mamba = min(1.0, held / self._slots) if self._slots else 0.0
        return PoolUsage(
            token_usage=round(max(full, mamba), 2),  # SGLang rounds this gauge (not the others)
            full_token_usage=full,
            mamba_usage=mamba,
            used_tokens=ctx_tokens,
            mamba_used=held,
        )

    # ---- PoolModel -----------------------------------------------------------------------------------

    @property
    def kv_policy(self) -> KvPolicy:
        return self._policy

    @property
    def is_hybrid(self) -> bool:
        return self.capacity.model.is_hybrid

    @property
    def cuda_graph_max_bs(self) -> int:
        return self._graph_bs

    @property
    def chunked_prefill_size(self) -> int | None:
        """SGLang's chunk size: the flag, else its default for the GPU's memory; -1 (or 0) turns chunking off."""
        size = self.capacity.flags.chunked_prefill_size or auto_chunked_prefill_size(self.capacity.gpu.memory_mib)
        return size if size > 0 else None

    def prefill_batch_time_s(self, fill_tokens: Sequence[int], read_tokens: int = 0) -> float:
        """Weights read once for the batch; each request's prompt computed on its own; plus the fixed cost. A mixed
        batch's decode rows are one fill token each, and their KV (``read_tokens``) is read besides."""
        cap = self.capacity
        cost, params = cap.cost, cap.roofline
        total = sum(fill_tokens)
        if total <= 0:
            return 0.0
        moved = (
            cost.weights_dense_bytes
            + cost.experts_bytes * cost.experts_touched(total)
            + (total + read_tokens) * cost.kv_bytes_per_token
            + len(fill_tokens) * cost.state_rw_bytes_per_request
        )
        compute = sum(cap.prefill_compute_s(n) for n in fill_tokens)
        return max(moved / (params.eta_bw * cost.bandwidth), compute) + fixed_time(cost, params)

    # ---- what the server reports ---------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.capacity.pools.context_length

    @property
    def max_req_len(self) -> int:
        """SGLang's ``max_req_len``: prompt plus output of one request never exceeds it."""
        return min(self.context_length - 1, self._kv_tokens - 1)

    @property
    def max_req_input_len(self) -> int:
        return self.max_req_len - MAX_REQ_INPUT_MARGIN

    def max_new_tokens(self, prompt_tokens: int, requested: int) -> int:
        """SGLang caps each request's ``max_new_tokens`` so that it fits the context and the KV pool."""
        return max(0, min(requested, self.max_req_len - prompt_tokens - 1))

    def resolve(self, cfg: SimSpec) -> SimSpec:
        """``cfg`` with the limits the twin sized (context length, max running, KV tokens) filled in."""
        return cfg.model_copy(
            update={
                "context_length": self.context_length,
                "max_running_requests": self._max_running,
                "max_total_tokens": self._kv_tokens,
            }
        )

    @property
    def prefix_cache_tokens(self) -> int:
        """Tokens the radix cache may hold (the KV pool); 0 with the radix cache off."""
        return self._kv_tokens if self.capacity.pools.strategy.radix_cache else 0
