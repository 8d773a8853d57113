"""The simulator's Prometheus exposition: SGLang names and labels, parseable text, correct buckets."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tokenmill.config import SimSpec
from tokenmill.sim.engine import Timing
from tokenmill.sim.metrics import Histogram, RequestMetrics, SimCollector, exposition, make_registry
from tokenmill.sim.scheduler import SchedulerSnapshot
from tokenmill.sim.timing import LinearStepModel


def test_histogram_buckets_are_inclusive_upper_bounds() -> None:
    h = Histogram([1.0, 2.0])
    for v in (0.5, 1.0, 1.5, 3.0):
        h.observe(v)
    h.observe(2.0, n=3)
    assert h.counts == [2, 4, 1]
    assert (h.count, h.total) == (7, 0.5 + 1.0 + 1.5 + 3.0 + 6.0)


def test_exposition_parses_and_carries_sglang_names() -> None:
    model = LinearStepModel(SimSpec(max_running_requests=10, max_total_tokens=100))
    snap = SchedulerSnapshot(
        running=5,
        waiting=7,
        ctx_tokens=50,
        usage=model.usage(5, 50),
        gen_throughput=123.0,
        decode_tokens=400,
        prefill_tokens=90,
        paused=False,
    )
    reqs = RequestMetrics()
    reqs.observe_finished(10, 21, Timing(queue_s=0.5, ttft_s=1.0, e2e_s=3.0))
    registry = make_registry(SimCollector("m", model, 4096, lambda: snap, reqs, lambda: {"drop": 2, "error": 0}))
    text = exposition(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }

    def value(name: str, **extra: str) -> float:
        hits = [v for (n, labels), v in samples.items() if n == name and set(extra.items()) <= set(labels)]
        assert len(hits) == 1, (name, extra)
        return hits[0]

    sched = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    assert value("sglang:num_running_reqs", **sched) == 5
    assert value("sglang:num_queue_reqs") == 7
    assert value("sglang:token_usage") == 0.5
    assert value("sglang:mamba_usage") == 0.5
    assert value("sglang:gen_throughput") == 123
    assert value("sglang:realtime_tokens_total", mode="decode") == 400
    assert value("sglang:realtime_tokens_total", mode="prefill_compute") == 90
    assert value("sglang:prompt_tokens_total", model_name="m", is_streaming="false") == 10
    assert value("sglang:generation_tokens_total") == 21
    assert value("sglang:num_requests_total") == 1
    assert value("sglang:e2e_request_latency_seconds_count") == 1
    assert value("sglang:e2e_request_latency_seconds_bucket", le="2.0") == 0
    assert value("sglang:e2e_request_latency_seconds_bucket", le="4.0") == 1
    assert value("sglang:inter_token_latency_seconds_count") == 20  # 2 s of decode over 20 tokens
    assert value("sglang:inter_token_latency_seconds_bucket", le="0.1") == 20
    assert value("sglang:context_len") == 4096
    assert value("tokenmill_sim_faults_total", kind="drop") == 2


def test_each_registry_is_separate() -> None:
    model = LinearStepModel(SimSpec())
    snap = SchedulerSnapshot(0, 0, 0, model.usage(0, 0), 0.0, 0, 0, False)
    a, b = RequestMetrics(), RequestMetrics()
    a.observe_finished(1, 1, Timing(0, 0, 0))
    ra = make_registry(SimCollector("a", model, 1, lambda: snap, a, dict))
    rb = make_registry(SimCollector("b", model, 1, lambda: snap, b, dict))
    assert 'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="a"} 1.0' in (
        exposition(ra).decode()
    )
    assert 'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="b"} 0.0' in (
        exposition(rb).decode()
    )
