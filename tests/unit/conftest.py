"""Fixtures of the unit tier."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

Handler = Callable[[web.Request], Any]


@pytest.fixture
async def http_server() -> AsyncIterator[Callable[[Handler], Any]]:
    """``await http_server(handler)`` starts a loopback HTTP server (a free port) answering every POST with
    ``handler`` and returns its URL; every server started is stopped at the end of the test."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    yield start
    for r in runners:
        await r.cleanup()
