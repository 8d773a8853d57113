"""What the simulated scheduler shows: its snapshot, the gauges as SGLang last wrote them, and SGLang's scheduler
log lines (prefill batch, decode batch, retraction), in the hybrid or the plain format."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tokenmill.sim.requests import PoolModel
from tokenmill.sim.timing import PoolUsage

log = logging.getLogger(__name__)


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


class Gauges:
    """The gauges as SGLang last wrote them: at each prefill batch (running before the batch, queue, pools, the
    new-token ratio, the batch's hit rate) and at every decode log boundary (running, queue, pools, sequence
    lengths, throughput)."""

    def __init__(self) -> None:
        self.written: SchedulerSnapshot | None = None

    def at_prefill(self, live: SchedulerSnapshot, running: int) -> None:
        """A prefill batch formed with ``running`` requests running before it (``decode_sum_seq_lens`` is written at
        decode only)."""
        seq = self.written.ctx_tokens if self.written is not None else 0
        self.written = replace(live, running=running, ctx_tokens=seq)

    def at_decode(self, live: SchedulerSnapshot, hit_rate: float) -> None:
        """A decode log boundary (the new-token ratio is written at prefill only)."""
        ratio = self.written.new_token_ratio if self.written is not None else live.new_token_ratio
        self.written = replace(live, new_token_ratio=ratio, cache_hit_rate=hit_rate)

    def shown(self, live: SchedulerSnapshot, idle: bool) -> SchedulerSnapshot:
        """What a scrape sees: counters as of now, gauges as last written; an idle engine shows its idle state."""
        pub = self.written
        if pub is None or idle:
            return live
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


def log_decode(u: PoolUsage, *, running: int, waiting: int, throughput: float, cuda_graph: bool, hybrid: bool) -> None:
    """SGLang's ``Decode batch`` line (the hybrid one with ``mamba usage``, else the plain one)."""
    if not log.isEnabledFor(logging.INFO):
        return
    if hybrid:
        log.info(
            "Decode batch, #running-req: %d, #full token: %d, full token usage: %.2f, mamba num: %d, "
            "mamba usage: %.2f, cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d",
            running,
            u.used_tokens,
            u.full_token_usage,
            u.mamba_used,
            u.mamba_usage,
            cuda_graph,
            throughput,
            waiting,
        )
    else:
        log.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d",
            running,
            u.used_tokens,
            u.token_usage,
            cuda_graph,
            throughput,
            waiting,
        )


def log_prefill(
    u: PoolUsage,
    *,
    batch: int,
    new_tokens: int,
    cached_tokens: int,
    running: int,
    waiting: int,
    gap_s: float,
    hybrid: bool,
) -> None:
    """SGLang's ``Prefill batch`` line; ``running`` is what ran before the batch, ``gap_s`` the time since the last."""
    if not log.isEnabledFor(logging.INFO):
        return
    usage = (
        f"full token usage: {u.full_token_usage:.2f}, mamba usage: {u.mamba_usage:.2f}"
        if hybrid
        else f"token usage: {u.token_usage:.2f}"
    )
    log.info(
        "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s, #running-req: %d, "
        "#queue-req: %d, #pending-token: 0, cuda graph: False, input throughput (token/s): %.2f",
        batch,
        new_tokens,
        cached_tokens,
        usage,
        running,
        waiting,
        new_tokens / gap_s if gap_s > 0 else 0.0,
    )


def log_retraction(
    before: PoolUsage, after: PoolUsage, *, retracted: int, old: float, new: float, hybrid: bool
) -> None:
    """SGLang's warning when a decode step does not fit and requests go back to the queue."""
    if not log.isEnabledFor(logging.WARNING):
        return
    mamba = f"#mamba_num_gained: {before.mamba_used - after.mamba_used}, " if hybrid else ""
    log.warning(
        "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_tokens_gained: %d, "
        "%s#new_token_ratio: %.4f -> %.4f",
        retracted,
        before.used_tokens - after.used_tokens,
        mamba,
        old,
        new,
    )


def cuda_graph(pool: PoolModel | None, running: int) -> bool:
    """Whether a decode batch of ``running`` runs with CUDA graphs (always for the plain simulator)."""
    return pool is None or running <= pool.cuda_graph_max_bs


def hybrid_lines(pool: PoolModel | None) -> bool:
    """Whether the log lines take SGLang's hybrid format (the plain simulator writes it)."""
    return pool is None or pool.is_hybrid
