"""The twin over loopback: its own /metrics and /server_info against the capacity planner's predictions.

The 27B GDN hybrid on an RTX PRO 6000 (bundled in the planner); simulated time runs a few hundred times
faster than real time, and throughput read from the twin's wall-clock counters is scaled back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.helpers.simserver import metrics, until
from tokenmill.config import PlannerSpec, SimSpec
from tokenmill.planner import GpuCatalog, Workload, load_model, parse_flags, plan, server_capacity
from tokenmill.sim import SimServer

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
EXTRA = "--mamba-scheduler-strategy extra_buffer"
NO_BUFFER = "--mamba-scheduler-strategy no_buffer"
RADIX_OFF = "--disable-radix-cache --max-running-requests 48"
DECODE = "sglang:realtime_tokens_total{mode=decode}"


def twin_config(flags: str, time_scale: float, **extra: Any) -> SimSpec:
    return SimSpec(model=MODEL, gpu=GPU, engine_flags=flags, time_scale=time_scale, **extra)


def generate_body(prompt_tokens: int, max_new_tokens: int) -> dict[str, Any]:
    return {
        "input_ids": list(range(prompt_tokens)),
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
    }


@asynccontextmanager
async def saturated(
    cfg: SimSpec, body: dict[str, Any], clients: int, *, http: bool = True
) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """A twin kept busy by ``clients`` closed-loop clients; yields (url, session).

    ``http=False`` submits straight to the engine (the same requests without building and parsing their
    text), so that a busy machine cannot starve the twin's queue and the test measures the twin alone.
    """
    connector = aiohttp.TCPConnector(limit=0)
    async with SimServer(cfg) as srv, aiohttp.ClientSession(connector=connector) as session:
        prompt, limit = len(body["input_ids"]), body["sampling_params"]["max_new_tokens"]
        counter = itertools.count()

        async def client() -> None:
            while True:
                if not http:
                    await srv.engine.generate(prompt, limit, limit)
                    continue
                # a first token of its own: no prompt is a prefix-cache hit (the planner assumes none)
                unique = {**body, "input_ids": [next(counter), *body["input_ids"][1:]]}
                async with session.post(srv.url + "/generate", json=unique) as r:
                    assert r.status == 200
                    await r.read()

        tasks = [asyncio.create_task(client()) for _ in range(clients)]
        try:
            yield srv.url, session
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("flags", [EXTRA, NO_BUFFER], ids=["extra_buffer", "no_buffer"])
async def test_twin_and_planner_agree_on_max_running_and_throughput_at_saturation(flags: str) -> None:
    length, scale = 1024, 0.002
    predicted = plan(
        load_model(MODEL),
        GpuCatalog.load().get(GPU),
        parse_flags(flags),
        Workload(10**6, length, length),
        PlannerSpec(),
    )
    running = predicted.running
    lifetime_tokens = running * (length - 1)  # decode tokens of one generation of the running set
    body = generate_body(length, length)
    async with saturated(twin_config(flags, scale), body, clients=2 * running, http=False) as (url, s):
        seen: list[tuple[float, dict[str, float]]] = []

        async def decoded(at_least: float) -> bool:
            before = time.monotonic()
            m = await metrics(s, url)
            seen.append(((before + time.monotonic()) / 2, m))  # the scrape's instant, within half a round trip
            return m[DECODE] >= at_least

        await until(lambda: decoded(1.5 * lifetime_tokens))  # warm-up: past the first cohort
        seen.clear()
        await decoded(0)
        (t0, start) = seen[0]
        await until(lambda: decoded(start[DECODE] + 16 * lifetime_tokens), every=0.05)
        (t1, end) = seen[-1]
    # the decode counter leaves out each request's first token, which its prefill made
    measured = (end[DECODE] - start[DECODE]) / (t1 - t0) * scale * length / (length - 1)
    assert max(m["sglang:num_running_reqs"] for _, m in seen) == running
    assert measured == pytest.approx(predicted.output_tok_s, rel=0.05)


async def busy_twin(flags: str, running: int, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """/server_info and /metrics of a twin once ``running`` requests run and more wait."""
    async with saturated(twin_config(flags, 0.01), body, clients=2 * running) as (url, s):
        m: dict[str, float] = {}

        async def full_and_queueing() -> bool:
            m.update(await metrics(s, url))
            return m["sglang:num_running_reqs"] == running and m["sglang:num_queue_reqs"] > 0

        await until(full_and_queueing)
        async with s.get(url + "/server_info") as r:
            return dict(await r.json()), m


def found_info(found: dict[str, tuple[dict[str, Any], dict[str, float]]]) -> dict[str, dict[str, Any]]:
    return {flags: info for flags, (info, _) in found.items()}


async def test_strategies_show_their_own_max_running_state_and_kv_usage() -> None:
    prompt, out = 512, 256
    found = {}
    for flags, held in ((EXTRA, 3), (NO_BUFFER, 2), (RADIX_OFF, 1)):
        running = server_capacity(MODEL, GPU, flags).pools.max_running  # what the twin must show
        info, m = await busy_twin(flags, running, generate_body(prompt, out))
        (state,) = info["internal_states"]
        slots, kv = state["max_mamba_cache_size"], info["max_total_num_tokens"]
        assert state["effective_max_running_requests_per_dp"] == running
        assert info["engine_flags"] == flags
        assert m["sglang:mamba_usage"] == pytest.approx(running * held / slots)
        parts = ("used", "available", "evictable")
        assert sum(m[f"sglang:mamba_{part}_tokens"] for part in parts) == slots
        assert m["sglang:max_total_num_tokens"] == kv
        low, high = running * (prompt + 1) / kv, running * (prompt + out) / kv
        assert low <= m["sglang:full_token_usage"] <= high
        assert m["sglang:token_usage"] == round(max(m["sglang:full_token_usage"], m["sglang:mamba_usage"]), 2)
        found[flags] = (info, m)
    extra, no_buffer, off = (found[f][0] for f in (EXTRA, NO_BUFFER, RADIX_OFF))
    strategy = "mamba_radix_cache_strategy"
    assert (extra[strategy], no_buffer[strategy]) == ("extra_buffer", "no_buffer")
    assert (extra["disable_overlap_schedule"], no_buffer["disable_overlap_schedule"]) == (False, True)
    assert off["disable_radix_cache"] and off["tokenmill_twin"]["slots_per_request"] == 1
    slots_of = {name: info["internal_states"][0]["max_mamba_cache_size"] for name, info in found_info(found).items()}
    assert slots_of[EXTRA] == slots_of[NO_BUFFER] == server_capacity(MODEL, GPU, EXTRA).pools.mamba_slots
    assert slots_of[RADIX_OFF] == 48 and off["max_total_num_tokens"] > extra["max_total_num_tokens"]
    # the flags as given: SGLang decided the slot count, and the cap where no flag set it
    assert (extra["max_mamba_cache_size"], extra["max_running_requests"]) == (None, None)
    assert off["max_running_requests"] == 48
    assert len({round(found[f][1]["sglang:mamba_usage"], 3) for f in found}) == 3
    assert len({round(found[f][1]["sglang:full_token_usage"], 3) for f in found}) == 3


async def test_scarce_kv_retracts_requests_and_every_one_still_completes(caplog: pytest.LogCaptureFixture) -> None:
    flags = "--disable-radix-cache --max-running-requests 16 --max-total-tokens 6000"
    prompt, out, n = 100, 600, 24
    cfg = twin_config(flags, 0.001)
    with caplog.at_level(logging.WARNING, logger="tokenmill.sim"):
        async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
            assert srv.engine.model.max_total_tokens == 6000

            # ordinary requests that run to their limit: admitted on the decaying new-token ratio, they outgrow
            # the pool (ignore_eos ones reserve their whole output at admission and are never retracted)
            body = {"input_ids": list(range(prompt)), "sampling_params": {"max_new_tokens": out, "min_new_tokens": out}}

            async def one() -> dict[str, Any]:
                async with s.post(srv.url + "/generate", json=body) as r:
                    assert r.status == 200
                    return dict(await r.json())

            results = await asyncio.gather(*(one() for _ in range(n)))
            m = await metrics(s, srv.url)
    assert all(r["meta_info"]["completion_tokens"] == out for r in results)
    retractions = sum(r["meta_info"]["num_retractions"] for r in results)
    assert retractions > 0
    assert m["sglang:num_retracted_requests_total"] == retractions
    assert m["sglang:num_retracted_input_tokens_total"] == prompt * retractions
    assert m["sglang:num_retracted_output_tokens_total"] > 0
    assert m["sglang:num_requests_total"] == n
    assert m["sglang:generation_tokens_total"] == n * out
    # every retraction re-prefills the prompt and what was generated before it
    assert m["sglang:realtime_tokens_total{mode=prefill_compute}"] == (
        n * prompt + m["sglang:num_retracted_input_tokens_total"] + m["sglang:num_retracted_output_tokens_total"]
    )
    assert any(r.getMessage().startswith("KV cache pool is full. Retract requests.") for r in caplog.records)


async def test_twin_decode_log_line_is_sglangs_hybrid_one(caplog: pytest.LogCaptureFixture) -> None:
    cfg = twin_config(EXTRA, 0.001, decode_log_interval=10)
    with caplog.at_level(logging.INFO, logger="tokenmill.sim"):
        async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
            bodies = [generate_body(64, 50)] * 4
            async with s.post(srv.url + "/generate", json={**bodies[0], "input_ids": [b["input_ids"] for b in bodies]}):
                pass
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Decode batch")]
    pattern = re.compile(
        r"Decode batch, #running-req: (\d+), #full token: \d+, full token usage: \d\.\d\d, mamba num: (\d+), "
        r"mamba usage: \d\.\d\d, cuda graph: True, gen throughput \(token/s\): [\d.]+, #queue-req: 0"
    )
    assert lines
    for line in lines:
        match = pattern.fullmatch(line)
        assert match is not None, line
        assert int(match.group(2)) == 3 * int(match.group(1))  # a working slot and two track slots each


async def test_twin_limits_one_request_to_its_kv_pool_as_sglang_does() -> None:
    cfg = twin_config(EXTRA + " --max-total-tokens 3000", 0.0001)
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
        async with s.post(srv.url + "/generate", json=generate_body(100, 100_000)) as r:
            assert r.status == 200
            out = await r.json()
        assert out["meta_info"]["completion_tokens"] == 3000 - 1 - 100 - 1  # max_req_len - prompt - 1
        async with s.post(srv.url + "/generate", json=generate_body(2995, 10)) as r:
            assert r.status == 400
            err = await r.json()
        assert "Input length (2995 tokens) exceeds the maximum allowed length (2994 tokens)" in err["error"]["message"]
        async with s.get(srv.url + "/server_info") as r:
            info = await r.json()
        assert info["max_req_input_len"] == 2994
        assert info["context_length"] is None  # not given: SGLang takes the model's own
        async with s.get(srv.url + "/v1/models") as r:
            assert (await r.json())["data"][0]["max_model_len"] == 262_144  # not SimSpec's default
