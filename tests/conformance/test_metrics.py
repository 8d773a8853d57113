"""/metrics: names, types and labels; what the gauges read under a known load; the counters tokenmill turns
into rates and hit ratios; and what a dense model exports for the state pool."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.conformance.client import families, gauge, generate, metrics_text, start_load, until
from tests.engines import sglang
from tests.engines.pool import LiveServer
from tokenmill.monitor.scrape import ServerSnapshot, parse_metrics

SCHEDULER_LABELS = {"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}
GAUGES = (
    "num_running_reqs", "num_queue_reqs", "token_usage", "full_token_usage", "mamba_usage", "gen_throughput",
    "cache_hit_rate", "decode_sum_seq_lens", "max_total_num_tokens", "num_used_tokens", "new_token_ratio",
    "kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
    "mamba_used_tokens", "mamba_available_tokens", "mamba_evictable_tokens",
)  # fmt: skip
COUNTERS = ("prompt_tokens", "generation_tokens", "num_requests", "realtime_tokens")
LOAD = 6  # requests in flight, below every kind's running cap
LOAD_TOKENS = 400


async def test_families_have_sglang_names_types_and_labels(http: aiohttp.ClientSession, server: LiveServer) -> None:
    fams = await families(http, server)
    for name in GAUGES:
        fam = fams[f"sglang:{name}"]
        assert fam.type == "gauge", name
        (sample,) = fam.samples  # one scheduler, one label set
        assert set(sample.labels) == SCHEDULER_LABELS, (name, sample.labels)
    for name in COUNTERS:
        assert fams[f"sglang:{name}"].type == "counter", name
    modes = {s.labels["mode"] for s in fams["sglang:realtime_tokens"].samples if s.name.endswith("_total")}
    assert {"prefill_compute", "decode"} <= modes
    assert gauge(fams, "sglang:max_total_num_tokens") == sglang.KV_TOKENS


async def test_state_pool_gauges_tell_a_hybrid_from_a_dense_model(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    """A pure transformer exports the state gauges too, at 0: their presence does not make a server hybrid."""
    fams = await families(http, server)
    slots = sum(gauge(fams, f"sglang:mamba_{part}_tokens") for part in ("used", "available", "evictable"))
    assert "sglang:mamba_usage" in fams
    assert slots == (sglang.STATE_SLOTS if server.hybrid else 0)
    snap = parse_metrics(await metrics_text(http, server), time.monotonic())
    assert snap.hybrid is server.hybrid
    assert snap.state_slots_total == (sglang.STATE_SLOTS if server.hybrid else None)


async def test_gauges_under_a_known_load(http: aiohttp.ClientSession, server: LiveServer) -> None:
    tasks = start_load(http, server, LOAD, LOAD_TOKENS)
    try:

        async def snap() -> ServerSnapshot:
            return parse_metrics(await metrics_text(http, server), time.monotonic())

        busy = await until(snap, lambda s: s.running == LOAD and (s.sum_seq_lens or 0) > 0, "all requests running")
        assert busy.queued == 0
        assert busy.kv_pool_usage is not None and 0 < busy.kv_pool_usage < 1
        fams = await families(http, server)
        assert gauge(fams, "sglang:kv_used_tokens") > 0
        if server.hybrid:
            assert busy.state_slots_used == LOAD  # one working slot per running request
            assert busy.state_usage is not None and abs(busy.state_usage - LOAD / sglang.STATE_SLOTS) < 0.011
        else:
            assert busy.state_usage == 0 and busy.state_slots_used == 0
    finally:
        done = await asyncio.gather(*tasks)
    assert all(d["meta_info"]["completion_tokens"] == LOAD_TOKENS for d in done)


async def test_counters_advance_by_one_request(http: aiohttp.ClientSession, server: LiveServer) -> None:
    before = await families(http, server)
    body = await generate(http, server, "Count the days of the week.", 10, ignore_eos=True)
    meta = body["meta_info"]

    async def counted() -> dict[str, float]:
        fams = await families(http, server)
        return {n: fams[f"sglang:{n}"].value() - before[f"sglang:{n}"].value() for n in COUNTERS[:3]}

    delta = await until(counted, lambda d: d["num_requests"] >= 1, "the request counted")
    assert delta == {"prompt_tokens": meta["prompt_tokens"], "generation_tokens": 10, "num_requests": 1}


async def test_a_repeated_prompt_is_served_from_the_prefix_cache(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    """The radix cache: a prompt sent again is mostly a cache hit, in ``meta_info`` and in the counters that
    tokenmill turns into the prefix hit rate (``realtime_tokens{mode=prefill_cache}`` against
    ``prefill_compute``)."""
    prompt = "A long shared preamble about the world and its people. " * 8
    first = await generate(http, server, prompt, 4, ignore_eos=True)
    before = await families(http, server)
    second = await generate(http, server, prompt, 4, ignore_eos=True)
    n = second["meta_info"]["prompt_tokens"]
    assert first["meta_info"]["prompt_tokens"] == n
    assert n // 2 < second["meta_info"]["cached_tokens"] < n

    def delta(fams: dict[str, object], mode: str) -> float:
        cur = fams["sglang:realtime_tokens"].value(mode=mode)  # type: ignore[attr-defined]
        return float(cur - before["sglang:realtime_tokens"].value(mode=mode))

    fams = await until(lambda: families(http, server), lambda f: delta(f, "prefill_cache") > 0, "a cache hit counted")
    assert delta(fams, "prefill_cache") == second["meta_info"]["cached_tokens"]
    assert delta(fams, "prefill_compute") == n - second["meta_info"]["cached_tokens"]
