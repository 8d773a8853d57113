"""/server_info: which fields exist, what the top level holds (the launch flags) and what ``internal_states``
holds (the scheduler's computed values), and what tokenmill reads from it."""

from __future__ import annotations

import aiohttp

from tests.engines import sglang
from tests.engines.pool import LiveServer
from tests.helpers import recorded
from tests.helpers.conformance import get_json
from tokenmill.monitor.info import parse_server_info
from tokenmill.planner import parse_flags, server_capacity


async def test_top_level_holds_the_launch_flags(http: aiohttp.ClientSession, server: LiveServer) -> None:
    body = await get_json(http, server, "/server_info")
    assert body["version"] == sglang.VERSION
    assert body["status"] == "ready"
    assert body["max_total_num_tokens"] == sglang.KV_TOKENS  # from the scheduler
    assert isinstance(body["max_req_input_len"], int) and 0 < body["max_req_input_len"] < sglang.CONTEXT_LENGTH
    # the flags as given: None where SGLang decides
    assert body["max_running_requests"] is None
    assert body["max_total_tokens"] == sglang.KV_TOKENS
    assert body["context_length"] is None
    assert body["max_mamba_cache_size"] == (sglang.STATE_SLOTS if server.hybrid else None)
    assert body["mamba_radix_cache_strategy"] == ("no_buffer" if server.hybrid else "auto")
    assert body["disable_radix_cache"] is False
    assert body["disable_overlap_schedule"] is server.hybrid
    assert body["tp_size"] == body["dp_size"] == 1
    assert body["page_size"] == 1
    assert isinstance(body["mem_fraction_static"], float)


async def test_internal_states_hold_the_computed_values(http: aiohttp.ClientSession, server: LiveServer) -> None:
    body = await get_json(http, server, "/server_info")
    (state,) = body["internal_states"]
    cap = state["effective_max_running_requests_per_dp"]
    assert isinstance(cap, int) and cap > 0
    assert state["max_mamba_cache_size"] == (sglang.STATE_SLOTS if server.hybrid else None)
    assert state["memory_usage"]["token_capacity"] == sglang.KV_TOKENS
    assert isinstance(state["last_gen_throughput"], float)
    assert state["max_running_requests"] is None  # the scheduler's copy of the flag is not the cap either


async def test_planner_sizes_the_pools_the_server_reports(http: aiohttp.ClientSession, server: LiveServer) -> None:
    """The planner, given the server's model config and flags, finds the KV tokens, slots and running cap a real
    0.5.23 server with those flags reported (tests/fixtures/sglang-0.5.23, recorded by
    scripts/record_sglang_fixtures.py), and so does the server under test (the twin's numbers come from the
    planner: only the recording makes this a check of it)."""
    name = "hybrid" if server.hybrid else "dense"
    assert recorded.recording(name)["flags"] == [*sglang.COMMON_FLAGS, *server.kind.flags]  # the same launch
    real = recorded.server_info(name)
    (real_state,) = real["internal_states"]
    expected = (
        real["max_total_num_tokens"],
        real_state["max_mamba_cache_size"] or 0,
        real_state["effective_max_running_requests_per_dp"],
    )
    body = await get_json(http, server, "/server_info")
    (state,) = body["internal_states"]
    flags = parse_flags(" ".join(server.kind.flags))
    pools = server_capacity(str(server.model_dir / "config.json"), "rtx-pro-6000", flags).pools
    assert (pools.kv_tokens, pools.mamba_slots, pools.max_running) == expected
    seen = (
        body["max_total_num_tokens"],
        state["max_mamba_cache_size"] or 0,
        state["effective_max_running_requests_per_dp"],
    )
    assert seen == expected


async def test_tokenmill_reads_cap_slots_and_kind(http: aiohttp.ClientSession, server: LiveServer) -> None:
    body = await get_json(http, server, "/server_info")
    info = parse_server_info(body)
    assert info.max_running == body["internal_states"][0]["effective_max_running_requests_per_dp"]
    assert info.max_running_flag is None
    assert info.state_slots == (sglang.STATE_SLOTS if server.hybrid else None)
    assert info.hybrid is server.hybrid
    assert info.version == sglang.VERSION
    assert info.strategy_flag == "--mamba-radix-cache-strategy"
