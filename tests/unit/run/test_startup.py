"""The servers at start (:mod:`tokenmill.run.startup`): a first answer within ``retry.startup_wait_s`` starts the
run; none by then stops it naming each URL and its error. Time is a fake clock; the servers are real sockets on
loopback (one refusing, one answering)."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web

from tokenmill.backends.http import server_answers
from tokenmill.config import RetrySpec
from tokenmill.errors import ServerError
from tokenmill.run.startup import wait_for_a_server


def refused_url() -> str:
    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_no_server_by_the_deadline_names_each_url_and_its_error() -> None:
    urls = [refused_url(), "http://no-such-host.invalid:30000"]
    t = FakeTime()
    retry = RetrySpec(startup_wait_s=12, probe_interval_s=5)
    with pytest.raises(ServerError) as err:
        asyncio.run(wait_for_a_server(urls, retry, {}, clock=t.clock, sleep=t.sleep))
    text = str(err.value)
    assert text.startswith("no server answered within retry.startup_wait_s (12 s): ")
    assert f"{urls[0]}: connection refused; {urls[1]}: no such host" in text
    assert t.slept == [5, 5, 2]  # probed every probe_interval_s, the last wait cut to the deadline


def test_a_server_that_comes_up_during_the_wait_starts_the_run() -> None:
    async def main() -> tuple[list[float], str | None]:
        async def not_ready(_: web.Request) -> web.Response:
            return web.Response(status=503)  # there, not ready: an answer

        app = web.Application()
        app.router.add_get("/health", not_ready)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        t = FakeTime()
        session = aiohttp.ClientSession()

        async def comes_up(where: str) -> str | None:
            return await server_answers(session, where, {}, 2.0) if len(t.slept) >= 2 else "connection refused"

        try:
            retry = RetrySpec(startup_wait_s=60)
            await wait_for_a_server([url], retry, {}, check=comes_up, clock=t.clock, sleep=t.sleep)
            direct = await server_answers(session, url, {}, 2.0)
        finally:
            await session.close()
            await runner.cleanup()
        return t.slept, direct

    assert asyncio.run(main()) == ([5, 5], None)
