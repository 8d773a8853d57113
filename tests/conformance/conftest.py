"""The conformance suite: the contract tokenmill relies on, run against every server kind it applies to.

Every test takes a ``server``: by default each SGLang kind, real and twin (``SGLANG``); tests of the OpenAI
routes also run against real vLLM (``OPENAI``). The twin must pass every test the real server passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.engines.pool import LiveServer, ServerPool
from tests.helpers.conformance import SGLANG
from tests.helpers.servers import live_server


@pytest.fixture(params=SGLANG)
def server(request: pytest.FixtureRequest, server_pool: ServerPool) -> LiveServer:
    return live_server(server_pool, request.param)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield session
