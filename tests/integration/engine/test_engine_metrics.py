"""The metric scraper against a live vLLM server: the vllm: name map reads real values that move."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.engines.pool import LiveServer as EngineServer
from tests.helpers.waiting import wait_for_async
from tokenmill.monitor.scrape import ServerSnapshot, rates, scrape

pytestmark = pytest.mark.engine

POLL_DEADLINE_S = 30.0


async def poll(
    http: aiohttp.ClientSession, server: EngineServer, done: Callable[[ServerSnapshot], bool]
) -> ServerSnapshot:
    """Scrape until ``done(snapshot)`` holds; fails with the last snapshot after the deadline."""
    return await wait_for_async(
        "the condition on the scraped metrics",
        lambda: scrape(http, server.base_url, time.monotonic),
        POLL_DEADLINE_S,
        done=done,
    )


async def complete(http: aiohttp.ClientSession, server: EngineServer, max_tokens: int) -> dict[str, Any]:
    body = {"model": server.model, "prompt": "Count the days", "max_tokens": max_tokens, "ignore_eos": True}
    async with http.post(server.base_url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        payload: dict[str, Any] = await resp.json()
        return payload


def idle(snap: ServerSnapshot) -> bool:
    return snap.healthy and snap.running == 0 and snap.queued == 0


async def test_idle_server_snapshot(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    snap = await poll(http, engine_server, idle)
    assert snap.engine == "vllm"
    assert snap.error is None
    assert snap.kv_usage is not None and 0.0 <= snap.kv_usage <= 1.0
    for total in (snap.generation_tokens_total, snap.prompt_tokens_total, snap.requests_total):
        assert total is not None and total >= 0
    assert snap.preemptions_total == 0
    assert (snap.state_usage, snap.gen_throughput, snap.max_running) == (None, None, None)


async def test_counters_advance_by_exactly_one_request(
    http: aiohttp.ClientSession, engine_server: EngineServer
) -> None:
    before = await poll(http, engine_server, idle)
    body = await complete(http, engine_server, max_tokens=16)
    prompt_tokens = body["usage"]["prompt_tokens"]
    assert before.generation_tokens_total is not None and before.requests_total is not None
    after = await poll(
        http,
        engine_server,
        lambda s: (s.requests_total or 0) > (before.requests_total or 0),
    )
    assert after.generation_tokens_total == before.generation_tokens_total + 16
    assert after.prompt_tokens_total == (before.prompt_tokens_total or 0) + prompt_tokens
    assert after.requests_total == before.requests_total + 1
    r = rates(before, after)
    assert r is not None and r.generation_tok_s is not None and r.generation_tok_s > 0


async def test_running_and_kv_usage_while_busy(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    await poll(http, engine_server, idle)
    requests = [asyncio.create_task(complete(http, engine_server, max_tokens=160)) for _ in range(8)]
    try:
        busy = await poll(http, engine_server, lambda s: (s.running or 0) > 0)
        assert busy.kv_usage is not None and busy.kv_usage > 0
        assert busy.running is not None and busy.running <= 8
    finally:
        results = await asyncio.gather(*requests)
    assert all(r["usage"]["completion_tokens"] == 160 for r in results)
    done = await poll(http, engine_server, idle)
    assert done.kv_usage is not None and done.kv_usage < busy.kv_usage
