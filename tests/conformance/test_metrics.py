"""/metrics: names, types and labels; what the gauges read under a known load; the counters tokenmill turns
into rates and hit ratios; and what a dense model exports for the state pool."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.engines import sglang
from tests.engines.pool import LiveServer
from tests.helpers.conformance import Family, families, gauge, generate, metrics_text, post, start_load, until
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
            # no_buffer: each running request holds its working slot and its prompt's cached state (locked
            # while it runs); the states of finished requests stay in the tree as evictable
            assert busy.state_slots_used == 2 * LOAD
            assert busy.state_usage == 2 * LOAD / sglang.STATE_SLOTS
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


async def test_the_prefix_cache_serves_what_it_can_resume_from(http: aiohttp.ClientSession, server: LiveServer) -> None:
    """The radix cache, in ``meta_info`` and in the counters that tokenmill turns into the prefix hit rate
    (``realtime_tokens{mode=prefill_cache}`` against ``prefill_compute``). A dense model resumes from any cached
    token: a repeated prompt of n tokens is n - 1 hits. A hybrid resumes only where a recurrent state was kept,
    the end of a cached prompt: a repeated prompt is no hit (its last token must be computed from the state
    before it), a prompt that extends a cached one hits all of it."""
    prompt = list(range(5, 105))

    async def send(ids: list[int]) -> int:
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        status, answer = await post(http, server, "/generate", **body)
        assert status == 200, answer
        assert answer["meta_info"]["prompt_tokens"] == len(ids)
        return int(answer["meta_info"]["cached_tokens"])

    await send(prompt)
    before = await families(http, server)
    repeat, extension = await send(prompt), await send([*prompt, 3, 4])
    assert repeat == (0 if server.hybrid else len(prompt) - 1)
    assert extension == len(prompt)

    def delta(fams: dict[str, Family], mode: str) -> float:
        return fams["sglang:realtime_tokens"].value(mode=mode) - before["sglang:realtime_tokens"].value(mode=mode)

    hits = repeat + extension
    fams = await until(lambda: families(http, server), lambda f: delta(f, "prefill_cache") >= hits, "hits counted")
    assert delta(fams, "prefill_cache") == hits
    assert delta(fams, "prefill_compute") == 2 * len(prompt) + 2 - hits
