"""Polling a fleet: views, rates over a window, /server_info once, down and back, restarts, parse cost."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.helpers import recorded
from tokenmill.monitor.fleet import FleetMonitor
from tokenmill.monitor.info import launch_flags, parse_loads, parse_server_info
from tokenmill.monitor.scrape import ServerSnapshot, parse_metrics, relevant_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
SGLANG_TEXT = recorded.metrics("hybrid")  # a real 0.5.23 server under a known load
VLLM_TEXT = (FIXTURES / "vllm_0.32.0.txt").read_text()


def sglang_metrics(running: int, queued: int, decode: float, prompt: float = 0.0) -> str:
    labels = 'engine_type="unified",model_name="m",tp_rank="0",pp_rank="0"'
    return (
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{{{labels}}} {running}\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        f"sglang:num_queue_reqs{{{labels}}} {queued}\n"
        "# TYPE sglang:token_usage gauge\n"
        f"sglang:token_usage{{{labels}}} 0.5\n"
        "# TYPE sglang:realtime_tokens counter\n"
        f'sglang:realtime_tokens_total{{{labels},mode="decode"}} {decode}\n'
        f'sglang:realtime_tokens_total{{{labels},mode="prefill_compute"}} {prompt}\n'
        "# TYPE sglang:e2e_request_latency_seconds histogram\n"
        f'sglang:e2e_request_latency_seconds_bucket{{{labels},le="1.0"}} 3\n'
        f'sglang:e2e_request_latency_seconds_bucket{{{labels},le="+Inf"}} 4\n'
        f"sglang:e2e_request_latency_seconds_count{{{labels}}} 4\n"
        f"sglang:e2e_request_latency_seconds_sum{{{labels}}} 2.5\n"
    )


class Fake:
    """A server whose /metrics body and availability the test sets."""

    def __init__(self) -> None:
        self.body = sglang_metrics(1, 0, 0)
        self.up = True
        self.info: dict[str, Any] | None = {"internal_states": [{"effective_max_running_requests_per_dp": 64}]}
        self.hits: dict[str, int] = {}
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        if not self.up:
            return web.Response(status=503, text="starting")
        if request.path == "/metrics":
            return web.Response(text=self.body)
        if request.path == "/server_info" and self.info is not None:
            return web.json_response(self.info)
        raise web.HTTPNotFound()


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    server = Fake()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_rates_over_the_window_and_server_info_once(fake: Fake) -> None:
    clock = Clock()
    mon = FleetMonitor([fake.url], window_s=30.0, clock=clock)
    async with mon.session() as session:
        for i in range(4):
            fake.body = sglang_metrics(10 + i, 2, decode=1000.0 * i, prompt=500.0 * i)
            await mon.poll_once(session)
            clock.t += 2.0
    (view,) = mon.views
    assert view.healthy and view.engine == "sglang"
    assert view.decode_tok_s == pytest.approx(500.0)  # 3000 tokens over 6 s
    assert view.prompt_tok_s == pytest.approx(250.0)
    assert view.running == pytest.approx(11.5) and view.queued == 2.0
    assert view.max_running == 64
    assert view.decoded_tokens == pytest.approx(3000.0)
    assert view.preemptions_per_min == 0.0  # SGLang before its first retraction
    assert fake.hits["/server_info"] == 1 and fake.hits["/metrics"] == 4


async def test_down_and_back_counts_flips_and_rereads_server_info(fake: Fake) -> None:
    clock = Clock()
    mon = FleetMonitor([fake.url], clock=clock, flap_window_s=600.0)
    async with mon.session() as session:
        await mon.poll_once(session)
        fake.up = False
        clock.t += 3
        await mon.poll_once(session)
        clock.t += 3
        await mon.poll_once(session)
        view = mon.views[0]
        assert not view.healthy and view.down_for_s == 3.0
        assert view.error is not None and "HTTP 503" in view.error
        assert view.snapshot is not None and view.snapshot.healthy  # the last good numbers stay for context
        fake.up = True
        clock.t += 3
        await mon.poll_once(session)
        view = mon.views[0]
        assert view.healthy and view.transitions == 2 and view.down_for_s is None
        await mon.poll_once(session)
    assert fake.hits["/server_info"] == 2  # read again once it is back (it may have been restarted with new flags)


async def test_a_restarted_server_counter_does_not_go_negative(fake: Fake) -> None:
    clock = Clock()
    mon = FleetMonitor([fake.url], clock=clock)
    async with mon.session() as session:
        for decode in (5000.0, 6000.0, 100.0, 700.0):
            fake.body = sglang_metrics(4, 0, decode)
            await mon.poll_once(session)
            clock.t += 1
    view = mon.views[0]
    assert view.decoded_tokens == pytest.approx(1000 + 100 + 600)
    assert view.decode_tok_s == pytest.approx(600.0)  # the window restarted with the counter


async def test_vllm_is_never_asked_for_server_info(fake: Fake) -> None:
    fake.body = VLLM_TEXT
    mon = FleetMonitor([fake.url])
    async with mon.session() as session:
        await mon.poll_once(session)
        await mon.poll_once(session)
    assert mon.views[0].engine == "vllm"
    assert fake.hits.get("/server_info", 0) == 1  # the first look only; vLLM then is known not to have it


async def test_an_unreachable_server_is_a_view_not_an_exception() -> None:
    mon = FleetMonitor(["http://127.0.0.1:9"], timeout_s=1.0)
    views = await mon.sample(2, 0.01)
    assert not views[0].healthy and views[0].scrapes == 2


def test_sync_follows_added_and_removed_servers() -> None:
    mon = FleetMonitor(["http://a", "http://b"])
    mon.ingest("http://a", ServerSnapshot("sglang", 1.0, True, running=3))
    mon.sync(["http://a", "http://c"])
    assert [v.url for v in mon.views] == ["http://a", "http://c"]
    assert mon.views[0].running == 3  # kept its history


def _sample(text: str, name: str, mode: str | None = None) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and (mode is None or f'mode="{mode}"' in line):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {mode or ''} not in the recording")


def test_labelled_counters_and_filtered_parsing() -> None:
    snap = parse_metrics(SGLANG_TEXT, 1.0)
    assert snap.decode_tokens_total == _sample(SGLANG_TEXT, "sglang:realtime_tokens_total", "decode")
    assert snap.prefill_tokens_total == _sample(SGLANG_TEXT, "sglang:realtime_tokens_total", "prefill_compute")
    full = _sample(SGLANG_TEXT, "sglang:full_token_usage")
    assert snap.full_kv_usage == full and snap.kv_pool_usage == full  # the KV pool, not the fullest pool
    assert snap.kv_usage == _sample(SGLANG_TEXT, "sglang:token_usage") > full  # here the state pool is fuller
    kept = relevant_text(SGLANG_TEXT)
    assert "time_to_first_token" not in kept and "sglang:num_running_reqs{" in kept


def test_parse_cost_is_bounded_by_the_name_maps_not_the_server() -> None:
    # a big server: the same families plus 400 histogram series it does not need
    noise = "".join(
        f'sglang:per_stage_req_latency_seconds_bucket{{stage="s{i}",le="{b}"}} {i}\n'
        for i in range(40)
        for b in (0.1, 0.5, 1, 2, 5, 10, 20, 40, 80, "+Inf")
    )
    text = SGLANG_TEXT + "# TYPE sglang:per_stage_req_latency_seconds histogram\n" + noise
    start = time.perf_counter()
    for _ in range(20):
        snap = parse_metrics(text, 0.0)
    per_parse = (time.perf_counter() - start) / 20
    assert snap.running == recorded.recording("hybrid")["running_at_capture"]
    assert per_parse < 0.01  # milliseconds per scrape, however many series the server adds


def test_server_info_record_and_flags() -> None:
    info = parse_server_info(
        {
            "model_path": "qwen3.6-27b",
            "mamba_radix_cache_strategy": "extra_buffer",
            "disable_radix_cache": False,
            "mamba_ssm_dtype": "bfloat16",
            "max_mamba_cache_size": None,  # the launch flag: SGLang sized the pool
            "max_running_requests": None,
            "mem_fraction_static": 0.88,
            "tp_size": 2,
            "dp_size": 1,
            "page_size": 64,
            "max_total_num_tokens": 900000,
            "internal_states": [{"effective_max_running_requests_per_dp": 80, "max_mamba_cache_size": 400}],
            "tokenmill_sim": {"gpu": "h100"},
        }
    )
    assert info.max_running == 80 and info.gpus == 2 and info.gpu == "h100" and info.radix_cache
    assert info.strategy_flag == "--mamba-radix-cache-strategy"
    assert (info.state_slots, info.hybrid, info.max_mamba_cache_size) == (400, True, None)
    assert launch_flags(info) == [
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.88",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--mamba-ssm-dtype",
        "bfloat16",
        "--page-size",
        "64",
    ]
    pinned = parse_server_info({"max_mamba_cache_size": 64, "max_running_requests": 21, "max_total_tokens": 8192})
    assert launch_flags(pinned)[-6:] == [
        "--max-running-requests", "21", "--max-mamba-cache-size", "64", "--max-total-tokens", "8192",
    ]  # fmt: skip
    dense = parse_server_info(
        {"mamba_radix_cache_strategy": "auto", "internal_states": [{"max_mamba_cache_size": None}]}
    )
    assert (dense.hybrid, dense.state_slots, dense.strategy) == (False, None, None)
    assert "--mamba-radix-cache-strategy" not in launch_flags(dense)
    loads = parse_loads({"loads": [{"max_running_requests": 48}, {"max_running_requests": 48}]})
    assert loads is not None and loads.max_running == 96
    assert parse_loads({"aggregate": {}}) is None


def test_real_server_info_gives_cap_slots_kind_and_flags() -> None:
    hybrid = parse_server_info(recorded.server_info("hybrid"))
    assert (hybrid.max_running, hybrid.state_slots, hybrid.hybrid) == (
        recorded.recording("hybrid")["running_cap"],
        64,
        True,
    )
    assert (hybrid.strategy, hybrid.strategy_flag, hybrid.version) == (
        "no_buffer",
        "--mamba-radix-cache-strategy",
        "0.5.23",
    )
    flags = launch_flags(hybrid)
    for pair in (
        ["--mamba-radix-cache-strategy", "no_buffer"],
        ["--max-mamba-cache-size", "64"],
        ["--max-total-tokens", "8192"],
    ):
        at = flags.index(pair[0])
        assert flags[at : at + 2] == pair
    assert "--disable-overlap-schedule" in flags and "--max-running-requests" not in flags  # no such flag given
    dense = parse_server_info(recorded.server_info("dense"))
    assert (dense.max_running, dense.state_slots, dense.hybrid, dense.strategy) == (2048, None, False, None)
