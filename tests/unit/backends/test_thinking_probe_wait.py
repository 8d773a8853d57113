"""The start's thinking probe waits a bounded time per server: a server that takes the question and never
answers is passed over for the next one (the run's own requests then tell), so the run's start never hangs on it."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
from aiohttp import web

from tokenmill.backends import BackendOptions
from tokenmill.backends.thinking import probe_thinking
from tokenmill.config import SamplingSpec

ANSWER = {"choices": [{"message": {"content": "391"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 3}}


async def test_a_server_that_never_answers_is_passed_over_within_the_probes_wait() -> None:
    never = asyncio.Event()

    async def silent(request: web.Request) -> web.Response:
        await request.read()
        await never.wait()  # set only at the end of the test
        return web.Response(status=500)

    async def answers(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=orjson.dumps(ANSWER), content_type="application/json")

    urls, runners = [], []
    for handler in (silent, answers):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
    options = BackendOptions(model="m", sampling=SamplingSpec(max_tokens=16))
    try:
        async with aiohttp.ClientSession() as session:
            probe = await asyncio.wait_for(probe_thinking("openai-chat", options, session, urls, None, wait_s=0.3), 30)
    finally:
        never.set()
        for runner in runners:
            await runner.cleanup()
    assert probe is not None
    assert probe.server == urls[1], "the silent server's answer was waited for instead of the next server's"
    assert probe.excerpt == "391" and probe.where == "unseen"
