"""The metric scraper: recorded /metrics texts, engine detection, rates, and scraping over loopback HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.helpers import recorded
from tokenmill.monitor.scrape import (
    NAME_MAPS,
    ServerSnapshot,
    max_running_from_server_info,
    parse_metrics,
    rates,
    scrape,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
VLLM_TEXT = (FIXTURES / "vllm_0.32.0.txt").read_text()
SGLANG_TEXT = recorded.metrics("hybrid")  # a real 0.5.23 server: the tiny hybrid at its cap with a queue
HYBRID = recorded.recording("hybrid")


def test_vllm_recording_maps_every_field() -> None:
    snap = parse_metrics(VLLM_TEXT, taken_at=12.5)
    assert snap.engine == "vllm"
    assert snap.healthy and snap.error is None
    assert snap.taken_at == 12.5
    assert (snap.running, snap.queued) == (24.0, 0.0)
    assert snap.kv_usage == pytest.approx(0.002990905206616601)
    assert snap.generation_tokens_total == 5356.0
    assert snap.prompt_tokens_total == 391.0
    assert snap.requests_total == 12.0  # 7 stop + 5 length, summed over finished_reason
    assert snap.preemptions_total == 0.0
    # vLLM has no recurrent-state pool, no throughput gauge and no /server_info
    assert (snap.state_usage, snap.gen_throughput, snap.max_running) == (None, None, None)


def test_real_hybrid_recording_maps_every_field() -> None:
    snap = parse_metrics(SGLANG_TEXT, taken_at=1.0)
    assert snap.engine == "sglang" and snap.healthy and snap.error is None
    assert (snap.running, snap.queued) == (HYBRID["running_at_capture"], HYBRID["queued_at_capture"])
    assert snap.hybrid is True
    assert snap.state_slots_total == 64  # the recording's --max-mamba-cache-size
    assert snap.state_usage == (snap.state_slots_used or 0) / 64  # (size - available - evictable) / size
    assert snap.kv_pool_usage == snap.full_kv_usage
    # token_usage is the fuller pool, rounded to two decimals by SGLang
    assert snap.kv_usage == round(max(snap.full_kv_usage or 0, snap.state_usage), 2)
    assert snap.sum_seq_lens and snap.decode_tokens_total and snap.prefill_tokens_total
    assert snap.preemptions_total is None  # the retraction counters appear with the first retraction


def test_real_dense_recording_is_not_hybrid() -> None:
    """A pure transformer exports the state gauges at 0: not a state pool."""
    snap = parse_metrics(recorded.metrics("dense"), taken_at=1.0)
    assert snap.running == recorded.recording("dense")["running_at_capture"]
    assert snap.state_usage == 0 and snap.state_slots_used == 0
    assert (snap.hybrid, snap.state_slots_total) == (False, None)


def test_priority_split_is_not_counted_twice() -> None:
    """Under --enable-priority-scheduling each gauge is written per priority and once more as the total."""
    text = recorded.metrics("dense-priority")
    assert 'priority="0"' in text and 'priority=""' in text
    snap = parse_metrics(text, taken_at=1.0)
    assert snap.running == recorded.recording("dense-priority")["running_at_capture"] == 8


def test_dp_ranks_sum_counts_and_take_the_fullest_pool() -> None:
    one = parse_metrics(SGLANG_TEXT, taken_at=1.0)
    two = parse_metrics(recorded.as_ranks(SGLANG_TEXT, 2), taken_at=1.0)
    assert (two.running, two.queued) == (2 * (one.running or 0), 2 * (one.queued or 0))
    assert two.state_slots_total == 2 * (one.state_slots_total or 0)
    assert (two.kv_usage, two.state_usage) == (one.kv_usage, one.state_usage)  # fractions: the fullest pool
    assert two.requests_total == one.requests_total  # the tokenizer's counter, not per rank


def test_replicated_tensor_parallel_ranks_are_read_once() -> None:
    """With --enable-metrics-for-all-schedulers every TP rank reports the same scheduler."""
    both = parse_metrics(recorded.as_ranks(SGLANG_TEXT, 2, "tp_rank"), 1.0)
    one = parse_metrics(SGLANG_TEXT, 1.0)
    assert (both.running, both.queued, both.state_slots_total) == (one.running, one.queued, one.state_slots_total)


def test_counter_exposed_without_total_suffix_is_found() -> None:
    text = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions{engine="0"} 3\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 2\n'
    )
    snap = parse_metrics(text, taken_at=0.0)
    assert snap.preemptions_total == 3.0
    assert snap.running == 2.0


def test_created_series_are_not_mistaken_for_counters() -> None:
    text = (
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0"} 10\n'
        "# TYPE vllm:generation_tokens_created gauge\n"
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
    )
    assert parse_metrics(text, taken_at=0.0).generation_tokens_total == 10.0


def test_unknown_engine_is_healthy_but_says_why_it_is_empty() -> None:
    text = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
    snap = parse_metrics(text, taken_at=3.0)
    assert snap.engine == "unknown"
    assert snap.healthy
    assert snap.running is None
    assert snap.error is not None and "--enable-metrics" in snap.error


def test_malformed_text_is_unhealthy_not_an_exception() -> None:
    snap = parse_metrics('vllm:num_requests_running{engine="0" 1\n', taken_at=3.0)
    assert not snap.healthy
    assert snap.engine == "unknown"
    assert snap.error is not None and snap.error.startswith("unparseable /metrics")


def test_name_maps_only_name_snapshot_fields() -> None:
    field_names = {f.name for f in dataclasses.fields(ServerSnapshot)}
    for engine, names in NAME_MAPS.items():
        assert set(names) <= field_names, engine
        assert all(name.startswith(f"{engine}:") for name in names.values())


def test_max_running_from_server_info() -> None:
    states = [
        {"effective_max_running_requests_per_dp": 128},
        {"effective_max_running_requests_per_dp": 130},
    ]
    assert max_running_from_server_info({"internal_states": states, "max_running_requests": 999}) == 258
    assert max_running_from_server_info({"internal_states": [], "max_running_requests": 64}) == 64
    assert max_running_from_server_info({"max_running_requests": None}) is None
    assert max_running_from_server_info({"max_running_requests": True}) is None


def _snap(taken_at: float, gen: float | None, prompt: float | None = None) -> ServerSnapshot:
    return ServerSnapshot(
        engine="vllm",
        taken_at=taken_at,
        healthy=True,
        generation_tokens_total=gen,
        prompt_tokens_total=prompt,
        requests_total=None,
    )


def test_rates_per_second() -> None:
    r = rates(_snap(10.0, 1000.0, 50.0), _snap(12.0, 1500.0, 90.0))
    assert r is not None
    assert r.interval_s == 2.0
    assert r.generation_tok_s == 250.0
    assert r.prompt_tok_s == 20.0
    assert r.requests_s is None


def test_rates_after_a_restart_or_without_elapsed_time() -> None:
    restarted = rates(_snap(10.0, 1000.0), _snap(11.0, 5.0))
    assert restarted is not None and restarted.generation_tok_s is None
    assert rates(_snap(10.0, 1.0), _snap(10.0, 2.0)) is None
    missing = rates(_snap(10.0, None), _snap(11.0, 2.0))
    assert missing is not None and missing.generation_tok_s is None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FakeServer:
    """A loopback server whose routes tests set; counts hits per path."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.hits: dict[str, int] = {}
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        handler = self.routes.get(request.path)
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)


@pytest.fixture
async def fake() -> AsyncIterator[FakeServer]:
    server = FakeServer()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    yield server
    await runner.cleanup()


def _text(body: str, status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(text=body, status=status)

    return handler


def _clock() -> float:
    return 100.0


async def test_scrape_sglang_reads_server_info(fake: FakeServer) -> None:
    fake.routes["/metrics"] = _text(SGLANG_TEXT)

    async def info(request: web.Request) -> web.StreamResponse:
        return web.json_response({"internal_states": [{"effective_max_running_requests_per_dp": 256}]})

    fake.routes["/server_info"] = info
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url + "/", _clock)
    assert snap.engine == "sglang" and snap.healthy
    assert snap.max_running == 256
    assert snap.taken_at == 100.0
    assert snap.running == HYBRID["running_at_capture"]


async def test_scrape_sglang_tolerates_missing_server_info(fake: FakeServer) -> None:
    fake.routes["/metrics"] = _text(SGLANG_TEXT)
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url, _clock)
    assert fake.hits.get("/server_info") == 1
    assert snap.healthy and snap.max_running is None and snap.error is None


async def test_scrape_skips_server_info_when_capacity_is_known(fake: FakeServer) -> None:
    fake.routes["/metrics"] = _text(SGLANG_TEXT)
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url, _clock, max_running=64)
    assert "/server_info" not in fake.hits
    assert snap.max_running == 64


async def test_scrape_vllm_never_asks_for_server_info(fake: FakeServer) -> None:
    fake.routes["/metrics"] = _text(VLLM_TEXT)
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url, _clock)
    assert snap.engine == "vllm" and snap.running == 24.0
    assert fake.hits == {"/metrics": 1}


async def test_scrape_missing_metrics_route_hints_at_the_flag(fake: FakeServer) -> None:
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url, _clock)
    assert not snap.healthy
    assert snap.error is not None and "HTTP 404" in snap.error and "--enable-metrics" in snap.error


async def test_scrape_server_error_is_unhealthy(fake: FakeServer) -> None:
    fake.routes["/metrics"] = _text("boom", status=500)
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, fake.url, _clock)
    assert not snap.healthy
    assert snap.error is not None and "HTTP 500" in snap.error


async def test_scrape_down_server_is_unhealthy_not_an_exception() -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        snap = await scrape(session, url, _clock)
    assert not snap.healthy
    assert snap.engine == "unknown"
    assert snap.error is not None and url in snap.error and "is the server up" in snap.error


async def test_scrape_timeout_is_unhealthy(fake: FakeServer) -> None:
    never = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        await never.wait()
        return web.Response(text="")

    fake.routes["/metrics"] = stall
    timeout = aiohttp.ClientTimeout(total=0.2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        snap = await scrape(session, fake.url, _clock)
    never.set()
    assert not snap.healthy
    assert snap.error is not None and "timed out" in snap.error
