"""``retry.read_timeout_s`` bounds a whole request, not one socket read.

Regression: a server (or a proxy in front of it) that sends its answer a byte at a time never let a single
read wait ``read_timeout_s``, so the request, its slot and the end of the run waited for as long as the
trickle lasted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
from aiohttp import web

from tests.helpers import factories
from tests.helpers.dispatch import Sink
from tokenmill.backends import BackendOptions, make_backend
from tokenmill.config import RetrySpec, SamplingSpec
from tokenmill.records import Prompt

ANSWER = orjson.dumps(
    {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}}
)
BYTE_EVERY_S = 0.05  # the whole answer takes ANSWER bytes x this (several seconds)


async def one_prompt() -> AsyncIterator[Prompt]:
    yield Prompt(id="p0", text="hello")


async def trickle(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(ANSWER)
    await resp.prepare(request)
    for byte in ANSWER:
        await resp.write(bytes([byte]))
        await asyncio.sleep(BYTE_EVERY_S)
    return resp


async def test_a_trickling_answer_times_out_as_a_whole() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", trickle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    backend = make_backend("openai-chat", BackendOptions(model="m", sampling=SamplingSpec(max_tokens=4)))
    retry = RetrySpec(max_attempts=1, connect_timeout_s=0.5, read_timeout_s=0.5)
    sink = Sink()
    dispatcher = factories.dispatcher([url], backend, sink, retry, 1)
    began = time.monotonic()
    try:
        await dispatcher.run(one_prompt())
    finally:
        await runner.cleanup()
    took = time.monotonic() - began
    assert len(ANSWER) * BYTE_EVERY_S > 4, "the trickle must outlast the timeout by far"
    assert not sink.done and [f.id for f in sink.failed] == ["p0"]
    assert "timed out" in sink.failed[0].error
    assert took < 3.0, f"the request was not bounded by its timeout ({took:.1f} s)"
