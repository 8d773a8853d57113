"""Prometheus exposition of the simulated server, under SGLang's ``sglang:`` metric names and labels.

Counting is plain integer arithmetic on the hot path; metric families are built only when ``/metrics``
is scraped, by a collector on a per-server ``CollectorRegistry`` (so several simulators in one process
never share series). The names, types, labels and buckets are SGLang 0.5.23's (checked against a real
server by tests/conformance): scheduler metrics carry ``engine_type``, ``model_name``, ``moe_ep_rank``,
``pp_rank`` and ``tp_rank`` (the per-step retraction gauge also ``pid``); request metrics carry
``engine_type``, ``model_name`` and ``is_streaming``; ``cached_tokens`` carries ``cache_source``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tokenmill import histogram

if TYPE_CHECKING:
    from tokenmill.sim.scheduler import SchedulerSnapshot, Timing
    from tokenmill.sim.timing import StepModel

# SGLang's default buckets (observability/metrics_collector.py)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
QUEUE_BUCKETS = (
    0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100,
    200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip


class Histogram(histogram.Histogram):
    """The shared histogram, exposed as a Prometheus metric family."""

    def family(self, name: str, doc: str, labels: Mapping[str, str]) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=list(labels))
        cumulative, acc = [], 0
        for bound, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            cumulative.append((repr(bound), float(acc)))
        cumulative.append(("+Inf", float(self.count)))
        fam.add_metric(list(labels.values()), cumulative, self.total)
        return fam


class RequestMetrics:
    """Request-level counters, updated when a request finishes (as SGLang's tokenizer manager does)."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests = 0
        self.aborted = 0
        self.cached_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.queue = Histogram(QUEUE_BUCKETS)

    def observe_finished(
        self, prompt_tokens: int, completion_tokens: int, timing: Timing, cached_tokens: int = 0
    ) -> None:
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        self.generation_tokens += completion_tokens
        self.requests += 1
        self.ttft.observe(timing.ttft_s)
        self.e2e.observe(timing.e2e_s)
        self.queue.observe(timing.queue_s)
        if completion_tokens > 1:
            decode_s = timing.e2e_s - timing.ttft_s
            self.itl.observe(decode_s / (completion_tokens - 1), completion_tokens - 1)


class SimCollector:
    """Builds every metric family from live state at scrape time."""

    def __init__(
        self,
        model_name: str,
        step_model: StepModel,
        context_length: int,
        snapshot: Callable[[], SchedulerSnapshot],
        requests: RequestMetrics,
        faults: Callable[[], Mapping[str, int]],
        cached_states: Callable[[], int] = lambda: 0,
    ) -> None:
        self._sched_labels = {
            "engine_type": "unified",
            "model_name": model_name,
            "moe_ep_rank": "0",
            "pp_rank": "0",
            "tp_rank": "0",
        }
        self._pid = str(os.getpid())
        self._req_labels = {"model_name": model_name, "engine_type": "unified", "is_streaming": "false"}
        self._model = step_model
        self._context_length = context_length
        self._snapshot = snapshot
        self._requests = requests
        self._faults = faults
        self._cached_states = cached_states

    def collect(self) -> Iterator[Metric]:
        yield from self._scheduler_families(self._snapshot())
        yield from self._request_families()
        faults = CounterMetricFamily(
            "tokenmill_sim_faults", "Faults injected by the simulator, by kind.", labels=["kind"]
        )
        for kind, count in sorted(self._faults().items()):
            faults.add_metric([kind], count)
        yield faults

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(f"sglang:{name}", doc, labels=list(self._sched_labels))
        fam.add_metric(list(self._sched_labels.values()), value)
        return fam

    def _scheduler_families(self, s: SchedulerSnapshot) -> Iterator[Metric]:
        m, g = self._model, self._gauge
        yield g("num_running_reqs", "The number of running requests.", s.running)
        yield g("num_queue_reqs", "The number of requests in the waiting queue.", s.waiting)
        yield g("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0)
        yield g("gen_throughput", "The generation throughput (token/s).", s.gen_throughput)
        yield g("cache_hit_rate", "The prefix cache hit rate.", s.cache_hit_rate)
        yield g("decode_sum_seq_lens", "The sum of all sequence lengths in decode.", s.ctx_tokens)
        yield from self._pool_families(s)
        retracted = GaugeMetricFamily(
            "sglang:num_retracted_reqs", "The number of retracted requests.", labels=[*self._sched_labels, "pid"]
        )
        retracted.add_metric([*self._sched_labels.values(), self._pid], s.last_retracted)
        yield retracted
        yield g("num_paused_reqs", "The number of paused requests.", s.waiting if s.paused else 0)
        yield g("new_token_ratio", "The new token ratio.", s.new_token_ratio)
        yield g("is_cuda_graph", "Whether the batch is using CUDA graph.", 1.0 if s.cuda_graph else 0.0)
        yield g("max_total_num_tokens", "Maximum total number of tokens in the KV pool.", m.max_total_tokens)
        yield g("context_len", "The context length.", self._context_length)
        yield from self._token_counters(s)
        yield self._requests.queue.family(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", self._sched_labels
        )

    def _pool_families(self, s: SchedulerSnapshot) -> Iterator[Metric]:
        """The KV and state pools' gauges: used, free and evictable slots."""
        m, u = self._model, s.usage
        g = self._gauge
        yield g("token_usage", "The token usage.", u.token_usage)
        yield g("full_token_usage", "The token usage for full attention layers.", u.full_token_usage)
        yield g("mamba_usage", "The token usage for Mamba layers.", u.mamba_usage)
        yield g("num_used_tokens", "The number of used tokens.", u.used_tokens)
        yield g("kv_used_tokens", "Number of actively used token slots in the KV cache pool.", u.used_tokens)
        yield g(
            "kv_available_tokens",
            "Number of free token slots in the KV cache pool.",
            max(0, m.max_total_tokens - u.used_tokens - s.kv_evictable_tokens),
        )
        yield g("kv_evictable_tokens", "Number of evictable token slots in the KV cache pool.", s.kv_evictable_tokens)
        # states of finished requests stay in the radix tree, evictable, as far as the pool has room for them
        evictable = min(self._cached_states(), max(0, m.mamba_slots - u.mamba_used))
        yield g("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool.", u.mamba_used)
        yield g(
            "mamba_available_tokens",
            "Number of free state slots in the mamba SSM pool.",
            max(0, m.mamba_slots - u.mamba_used - evictable),
        )
        yield g("mamba_evictable_tokens", "Number of evictable state slots in the mamba SSM pool.", evictable)

    def _token_counters(self, s: SchedulerSnapshot) -> Iterator[Metric]:
        """The retraction counters (once there is one) and the tokens processed, by mode."""
        # SGLang creates the retraction counters at the first retraction: absent means none so far
        for name, doc, value in (
            ("num_retracted_requests", "Total number of retracted requests.", s.retracted_requests),
            ("num_retracted_input_tokens", "Total number of retracted input tokens.", s.retracted_input_tokens),
            ("num_retracted_output_tokens", "Total number of retracted output tokens.", s.retracted_output_tokens),
        )[: 3 if s.retracted_requests else 0]:
            counter = CounterMetricFamily(f"sglang:{name}", doc, labels=list(self._sched_labels))
            counter.add_metric(list(self._sched_labels.values()), value)
            yield counter
        realtime = CounterMetricFamily(
            "sglang:realtime_tokens",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            labels=[*self._sched_labels, "mode"],
        )
        for mode, value in (
            ("prefill_compute", s.prefill_tokens),
            ("prefill_cache", s.prefill_cache_tokens),
            ("decode", s.decode_tokens),
        ):
            realtime.add_metric([*self._sched_labels.values(), mode], value)
        yield realtime

    def _request_families(self) -> Iterator[Metric]:
        r, labels = self._requests, self._req_labels
        base = {k: v for k, v in labels.items() if k != "is_streaming"}
        for name, doc, value, lab in (
            ("prompt_tokens", "Number of prefill tokens processed.", r.prompt_tokens, labels),
            ("generation_tokens", "Number of generation tokens processed.", r.generation_tokens, labels),
            ("num_requests", "Number of requests processed.", r.requests, labels),
            ("num_aborted_requests", "Number of requests aborted.", r.aborted, base),
        ):
            fam = CounterMetricFamily(f"sglang:{name}", doc, labels=list(lab))
            fam.add_metric(list(lab.values()), value)
            yield fam
        cached = CounterMetricFamily(
            "sglang:cached_tokens", "Number of cached prompt tokens.", labels=["cache_source", *base]
        )
        cached.add_metric(["device", *base.values()], r.cached_tokens)
        yield cached
        yield r.ttft.family(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels
        )
        yield r.itl.family("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", base)
        yield r.e2e.family(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", labels
        )


def make_registry(collector: SimCollector) -> CollectorRegistry:
    """A registry of its own holding ``collector``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of ``registry``."""
    return generate_latest(registry)  # type: ignore[no-any-return]
