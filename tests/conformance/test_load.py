"""Servers under load: what a full SGLang server does, and the twin held to the same numbers.

Each test runs against a real SGLang 0.5.23 server with small pools and against the twin launched with the
same flags (``twin-of-…``), with one assertion for both. Requests are ``/generate`` with ``input_ids``, so no
tokenizer is involved: the point is the scheduler. Answers run to their limit either with ``ignore_eos``
(SGLang then reserves the whole remaining output at admission) or with ``min_new_tokens`` equal to
``max_new_tokens`` (an ordinary request, admitted on the decaying new-token ratio, that never stops early).

Gauges are snapshots SGLang writes at each prefill batch and every ``--decode-log-interval`` decode steps, so
the tests take the extremes over a run's scrapes (the most requests seen running, queued) and the counts the
server reports per request (``num_retractions``, ``cached_tokens``), not one sampled moment.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.engines import sglang
from tests.engines.pool import SGLANG_DENSE_FLAGGED, LiveServer, ServerPool, sglang_kind, twin_of
from tests.helpers.conformance import Family, burst, families, gauge, post, until
from tests.helpers.servers import live_server

KV_SMALL = sglang_kind("sglang-dense-kv2048", False, sglang.dense_flags(kv_tokens=2048))
# The twins of the load tests run at the pace of the real CPU server: its decode steps take ~10 ms (26 s for the
# ~2,700 steps of the ordinary KV-pressure case), the twin's GPU's ~1 ms. What the twin decides follows its virtual
# clock, but which of its steps a request reaches and what a scrape catches follow the wall clock, as on the real
# server: at the same pace, a burst of requests spread by a busy client lands within as few steps.
PACE = 10.0
KV_KINDS = (KV_SMALL.name, twin_of(KV_SMALL, PACE).name)
# the suite's dense server with --max-running-requests 2 and --chunked-prefill-size 256 (tests/engines/pool.py)
FLAGGED_KINDS = (SGLANG_DENSE_FLAGGED.name, twin_of(SGLANG_DENSE_FLAGGED, PACE).name)

PRESSURE_REQUESTS = 6
PRESSURE_PROMPT = 60
PRESSURE_MAX_NEW = 900
SCRAPE_PAUSE_S = 0.01  # between scrapes while the load runs; the load's end is what is waited for
RETRACTED = "sglang:num_retracted_requests"


def prompt_ids(i: int, n: int) -> list[int]:
    """``n`` token ids of its own for request ``i`` (no two requests share a prefix; no special ids)."""
    return [16 + (i * 97 + j * 31) % 480 for j in range(n)]


@dataclass
class LoadSeen:
    """What a run of concurrent requests showed: the extremes of the scraped gauges and the answers."""

    max_running: int
    max_queued: int
    answers: list[dict[str, Any]]
    metrics: dict[str, Any]

    @property
    def retractions(self) -> int:
        return sum(int(a["meta_info"].get("num_retractions", 0)) for a in self.answers)


async def run_load(http: aiohttp.ClientSession, server: LiveServer, bodies: list[dict[str, Any]]) -> LoadSeen:
    """Send ``bodies`` to ``/generate`` as separate concurrent requests (as tokenmill sends them: one task each),
    scraping /metrics until all answer."""

    async def one(body: dict[str, Any]) -> dict[str, Any]:
        status, answer = await post(http, server, "/generate", **body)
        assert status == 200 and isinstance(answer, dict), answer
        return answer

    tasks = [asyncio.create_task(one(b)) for b in bodies]
    running = queued = 0
    while not all(t.done() for t in tasks):
        fams = await families(http, server)
        running = max(running, int(gauge(fams, "sglang:num_running_reqs")))
        queued = max(queued, int(gauge(fams, "sglang:num_queue_reqs")))
        await asyncio.wait(tasks, timeout=SCRAPE_PAUSE_S)
    answers = [t.result() for t in tasks]
    return LoadSeen(running, queued, answers, await families(http, server))


def pressure_bodies(tag: int, ignore_eos: bool) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"max_new_tokens": PRESSURE_MAX_NEW, "temperature": 0}
    if ignore_eos:
        params["ignore_eos"] = True
    else:
        params["min_new_tokens"] = PRESSURE_MAX_NEW
    return [
        {"input_ids": prompt_ids(tag * 10 + i, PRESSURE_PROMPT), "sampling_params": params}
        for i in range(PRESSURE_REQUESTS)
    ]


@pytest.fixture(params=KV_KINDS)
def kv_server(request: pytest.FixtureRequest, server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, request.param)


@pytest.fixture(params=FLAGGED_KINDS)
def flagged_server(request: pytest.FixtureRequest, server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, request.param)


def counter(fams: dict[str, Family], name: str) -> float | None:
    """A counter's value, None while the server has not created it."""
    return fams[name].value() if name in fams else None


# Tolerance: none. Running, queued and retracted are counts the scheduler decides from token arithmetic; on
# real SGLang they came out the same in every run (3 at once and 1 retraction, or 2 and 4 queued), and the
# twin must reproduce them exactly.


async def test_kv_pressure_with_ignore_eos_queues_without_retracting(
    http: aiohttp.ClientSession, kv_server: LiveServer
) -> None:
    """ignore_eos: each running request reserves its whole remaining output, so 2 of 961 tokens fit in 2048
    and 4 wait; nothing is retracted, and a server that never retracted has no retraction counter."""
    before = counter(await families(http, kv_server), RETRACTED)
    seen = await run_load(http, kv_server, pressure_bodies(2, ignore_eos=True))
    assert all(a["meta_info"]["completion_tokens"] == PRESSURE_MAX_NEW for a in seen.answers)
    assert (seen.max_running, seen.max_queued, seen.retractions) == (2, 4, 0)
    assert counter(seen.metrics, RETRACTED) == before  # still absent on a server that never retracted


async def test_kv_pressure_without_ignore_eos_admits_on_the_ratio_and_retracts(
    http: aiohttp.ClientSession, kv_server: LiveServer
) -> None:
    """Ordinary requests reserve only the decaying new-token ratio of what they may still write: the second
    batch starts under the decayed ratio, 3 run at once, the pool runs out and SGLang retracts one (which
    finishes later); the retraction counter exists from then on and counts it."""
    before = counter(await families(http, kv_server), RETRACTED) or 0.0
    seen = await run_load(http, kv_server, pressure_bodies(1, ignore_eos=False))
    assert all(a["meta_info"]["completion_tokens"] == PRESSURE_MAX_NEW for a in seen.answers)
    assert (seen.max_running, seen.max_queued, seen.retractions) == (3, 4, 1)
    assert counter(seen.metrics, RETRACTED) == before + 1


async def test_a_queue_forms_behind_max_running_requests(
    http: aiohttp.ClientSession, flagged_server: LiveServer
) -> None:
    """With room in the KV pool, --max-running-requests alone caps the batch: 2 run, the other 4 wait."""
    params = {"max_new_tokens": 64, "ignore_eos": True}
    bodies = [{"input_ids": prompt_ids(40 + i, 30), "sampling_params": params} for i in range(6)]
    seen = await run_load(http, flagged_server, bodies)
    assert (seen.max_running, seen.max_queued, seen.retractions) == (2, 4, 0)


PREFIX = 300
SUFFIX = 10
PREFIX_NEW = 64  # more than --decode-log-interval steps, so the gauges are rewritten before the server idles


def shared_prefix_batch(tag: int) -> dict[str, Any]:
    """One /generate call of six prompts sharing a new 300-token prefix, each with a suffix of its own."""
    prefix = [16 + (j * 7 + tag) % 480 for j in range(PREFIX)]
    prompts = [[*prefix, *prompt_ids(100 * tag + i, SUFFIX)] for i in range(PRESSURE_REQUESTS)]
    return {"input_ids": prompts, "sampling_params": {"max_new_tokens": PREFIX_NEW, "ignore_eos": True}}


async def test_a_shared_prefix_cold_then_warm(http: aiohttp.ClientSession, server: LiveServer) -> None:
    """Six requests sharing a new prefix, sent together, are prefilled together: none finds the prefix cached
    (the radix tree is filled after a prefill). Their tokens stay in the KV pool as evictable: the prefix once,
    each suffix and each answer but its last token. Six more with the same prefix are each served it, and the
    last prefill batch's hit rate says so. Tolerance: none (token counts)."""
    if server.hybrid:
        pytest.skip("a hybrid resumes only where a state was kept (the end of a cached sequence): not this case")
    async with http.post(server.base_url + "/flush_cache") as resp:  # SGLang answers in plain text
        assert resp.status == 200, await resp.text()
    status, cold = await post(http, server, "/generate", **shared_prefix_batch(1))
    assert status == 200, cold
    assert [a["meta_info"]["cached_tokens"] for a in cold] == [0] * PRESSURE_REQUESTS
    held = PREFIX + PRESSURE_REQUESTS * (SUFFIX + PREFIX_NEW - 1)
    idle = await until(
        lambda: families(http, server),
        lambda f: gauge(f, "sglang:kv_evictable_tokens") == held and gauge(f, "sglang:num_running_reqs") == 0,
        "the cold batch's tokens held as evictable",
    )
    total = gauge(idle, "sglang:max_total_num_tokens")
    assert gauge(idle, "sglang:kv_available_tokens") == total - held
    before = idle["sglang:realtime_tokens"].value(mode="prefill_cache")

    warm_batch = shared_prefix_batch(1)
    warm_batch["input_ids"] = [
        [*p[:PREFIX], *prompt_ids(900 + i, SUFFIX)] for i, p in enumerate(warm_batch["input_ids"])
    ]
    status, warm = await post(http, server, "/generate", **warm_batch)
    assert status == 200, warm
    assert [a["meta_info"]["cached_tokens"] for a in warm] == [PREFIX] * PRESSURE_REQUESTS
    fams = await until(
        lambda: families(http, server),
        lambda f: f["sglang:realtime_tokens"].value(mode="prefill_cache") - before == PREFIX * PRESSURE_REQUESTS,
        "the warm batch's hits counted",
    )
    hit_rate = PREFIX / (PREFIX + SUFFIX)
    assert gauge(fams, "sglang:cache_hit_rate") == pytest.approx(hit_rate, abs=1e-3)


async def test_separate_concurrent_requests_sharing_a_new_prefix_are_prefilled_together(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    """tokenmill sends one request per prompt, not one batch call: six separate /generate requests sent at once,
    sharing a new 300-token prefix, reach SGLang within one iteration of its event loop and are prefilled as one
    batch, so none finds the prefix cached (it is inserted after the prefill), however busy the machine. Six more
    sent the same way are then each served the prefix. Tolerance: none (token counts)."""
    if server.hybrid:
        pytest.skip("a hybrid resumes only where a state was kept (the end of a cached sequence): not this case")
    async with http.post(server.base_url + "/flush_cache") as resp:
        assert resp.status == 200, await resp.text()
    cold_prompts = shared_prefix_batch(3)["input_ids"]
    warm_prompts = [[*p[:PREFIX], *prompt_ids(950 + i, SUFFIX)] for i, p in enumerate(cold_prompts)]
    params = {"max_new_tokens": PREFIX_NEW, "ignore_eos": True}

    async def cached(prompts: list[list[int]]) -> list[int]:
        answers = await burst(server, "/generate", [{"input_ids": p, "sampling_params": params} for p in prompts])
        assert all(status == 200 for status, _ in answers), answers
        return [a["meta_info"]["cached_tokens"] for _, a in answers]

    assert await cached(cold_prompts) == [0] * PRESSURE_REQUESTS
    assert await cached(warm_prompts) == [PREFIX] * PRESSURE_REQUESTS


async def test_a_scrape_sees_the_gauges_of_the_last_batch_boundary(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    """SGLang writes decode_sum_seq_lens every --decode-log-interval (40) decode steps, not at each scrape:
    one request decoding alone shows it grow in steps of 40 whenever it is scraped."""
    body = {"input_ids": prompt_ids(77, 50), "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    task = asyncio.create_task(post(http, server, "/generate", **body))
    values: set[int] = set()
    while not task.done():
        fams = await families(http, server)
        if gauge(fams, "sglang:num_running_reqs") == 1:
            values.add(int(gauge(fams, "sglang:decode_sum_seq_lens")))
        await asyncio.wait([task], timeout=SCRAPE_PAUSE_S)
    status, answer = task.result()
    assert status == 200, answer
    seen = sorted(v for v in values if v > 0)
    assert len(seen) >= 3, f"too few decode boundaries seen: {seen}"
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert all(step % sglang.DECODE_LOG_INTERVAL == 0 for step in steps), seen


STATE_CAPPED = sglang_kind("sglang-hybrid-slots12", True, sglang.hybrid_flags(slots=12))  # no_buffer: 12 // 3 = 4
STATE_KINDS = (STATE_CAPPED.name, twin_of(STATE_CAPPED, PACE).name)


@pytest.fixture(params=STATE_KINDS)
def state_server(request: pytest.FixtureRequest, server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, request.param)


async def test_a_hybrid_at_its_state_slot_cap(http: aiohttp.ClientSession, state_server: LiveServer) -> None:
    """12 state slots under no_buffer cap the hybrid at 12 // 3 = 4 running whatever the KV pool holds, and
    the other 4 wait; nothing is retracted. Tolerance: none."""
    params = {"max_new_tokens": 120, "ignore_eos": True}
    bodies = [{"input_ids": prompt_ids(60 + i, 40), "sampling_params": params} for i in range(8)]
    seen = await run_load(http, state_server, bodies)
    assert (seen.max_running, seen.max_queued, seen.retractions) == (4, 4, 0)
    slots = sum(gauge(seen.metrics, f"sglang:mamba_{part}_tokens") for part in ("used", "available", "evictable"))
    assert slots == 12


LONG_PROMPT = 1000
CHUNK = 256


async def test_chunked_prefill_of_a_long_prompt(http: aiohttp.ClientSession, flagged_server: LiveServer) -> None:
    """SGLang prefills a 1,000-token prompt in chunks of --chunked-prefill-size (256): four prefill batches of
    256 + 256 + 256 + 232 tokens, each with a log line of its own; the twin writes and prices the same chunks.
    Tolerance: none (token counts)."""
    before = len(prefill_tokens(flagged_server.log_text()))
    body = {"input_ids": prompt_ids(5, LONG_PROMPT), "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    status, answer = await post(http, flagged_server, "/generate", **body)
    assert status == 200, answer
    assert answer["meta_info"]["prompt_tokens"] == LONG_PROMPT

    def chunks() -> list[int]:
        return prefill_tokens(flagged_server.log_text())[before:]

    expected = [CHUNK] * (LONG_PROMPT // CHUNK) + [LONG_PROMPT % CHUNK]
    seen = await until(_async(chunks), lambda c: sum(c) >= LONG_PROMPT, "the prefill log lines")
    assert seen == expected


def prefill_tokens(log: str) -> list[int]:
    """The ``#new-token`` of every ``Prefill batch`` line of a server log, in order."""
    return [int(m) for m in re.findall(r"Prefill batch, #new-seq: \d+, #new-token: (\d+)", log)]


def _async(f: Any) -> Any:
    async def call() -> Any:
        return f()

    return call
