"""The scheduler's log lines: the decode line tokenmill's calibration reads, with the pool fields of the
model kind."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from tests.conformance.client import start_load, until
from tests.engines.pool import LiveServer
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
