"""The scheduler's log lines: the decode line tokenmill's calibration reads, with the pool fields of the
model kind."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from tests.engines import sglang
from tests.engines.pool import LiveServer
from tests.helpers import recorded
from tests.helpers.conformance import get_json, start_load, until
from tokenmill.planner.calibrate import samples_from_log

DECODE = re.compile(r"Decode batch, #running-req: \d+, ")
HYBRID_PARTS = re.compile(
    r"#full token: \d+, full token usage: [0-9.]+, mamba num: \d+, mamba usage: [0-9.]+, "
    r"(?:cuda|cpu) graph: (?:True|False), gen throughput \(token/s\): [0-9.]+, #queue-req: \d+"
)
DENSE_PARTS = re.compile(
    r"#token: \d+, token usage: [0-9.]+, (?:cuda|cpu) graph: (?:True|False), "
    r"gen throughput \(token/s\): [0-9.]+, #queue-req: \d+"
)


def decode_lines(server: LiveServer) -> list[str]:
    return [line for line in server.log_text().splitlines() if DECODE.search(line)]


async def test_decode_lines_have_the_pool_fields_calibration_reads(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    seen = len(decode_lines(server))
    tasks = start_load(http, server, 4, 200, tag="log")
    await asyncio.gather(*tasks)
    lines = await until(lambda: asyncio.sleep(0, decode_lines(server)), lambda ls: len(ls) > seen, "a decode line")
    fresh = lines[seen:]
    parts = HYBRID_PARTS if server.hybrid else DENSE_PARTS
    assert all(parts.search(line) for line in fresh), fresh[-1]
    samples = samples_from_log(fresh)
    assert samples and all(s.running >= 1 and s.gen_tok_s >= 0 for s in samples)
    assert max(s.running for s in samples) <= 4


KV_LINE = re.compile(r"KV Cache is allocated\. dtype: torch\.\w+, #tokens: (\d+), K size: ")
LIMITS_LINE = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=\d+, max_prefill_tokens=\d+, max_running_requests=(\d+)"
)
MAMBA_LINE = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), ")


def pool_numbers(log: str) -> tuple[int | None, ...]:
    """KV tokens, running cap and state slots as a start-up log states them (None: the line is not there)."""
    kv, limits, mamba = KV_LINE.search(log), LIMITS_LINE.search(log), MAMBA_LINE.search(log)
    return (
        int(kv[1]) if kv else None,
        int(limits[1]) if limits else None,
        int(limits[2]) if limits else None,
        int(mamba[1]) if mamba else None,
    )


async def test_startup_lines_state_the_real_servers_pools(server: LiveServer) -> None:
    """The start-up lines give the numbers a real 0.5.23 server with the same flags logged
    (tests/fixtures/sglang-0.5.23/log-*.txt, recorded by scripts/record_sglang_fixtures.py)."""
    name = "hybrid" if server.hybrid else "dense"
    assert recorded.recording(name)["flags"] == [*sglang.COMMON_FLAGS, *server.kind.flags]  # the same launch
    real = pool_numbers("\n".join(recorded.log_lines(name)))
    assert None not in real[:3]
    assert pool_numbers(server.log_text()) == real


async def test_startup_lines_report_the_pools(http: aiohttp.ClientSession, server: LiveServer) -> None:
    """The allocation lines docs/planner.md asks users to compare with the planner, in SGLang's formats."""
    info = await get_json(http, server, "/server_info")
    cap = info["internal_states"][0]["effective_max_running_requests_per_dp"]
    log = server.log_text()
    kv = re.search(r"KV Cache is allocated\. dtype: torch\.\w+, #tokens: (\d+), K size: [0-9.]+ GB, V size: ", log)
    assert kv and int(kv[1]) == info["max_total_num_tokens"], log[-2000:]
    limits = re.search(
        r"max_total_num_tokens=(\d+), chunked_prefill_size=\d+, max_prefill_tokens=\d+, "
        r"max_running_requests=(\d+), context_len=(\d+), available_(?:gpu|cpu)_mem=[0-9.]+ GB",
        log,
    )
    assert limits and (int(limits[1]), int(limits[2]), int(limits[3])) == (
        info["max_total_num_tokens"],
        cap,
        server.max_model_len,
    )
    mamba = re.search(
        r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: [0-9.]+GB, ssm_state size: ", log
    )
    assert (int(mamba[1]) if mamba else None) == (info["internal_states"][0]["max_mamba_cache_size"])
