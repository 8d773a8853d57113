"""A 200 whose JSON has the wrong shape is a retryable malformed-body error for every API, never a crash.

Regression: a field of the wrong JSON type (``"message": null``, ``"meta_info": []``) raised AttributeError
from the parser, which the dispatcher treats as a bug and stops the whole run on; a non-string text was
recorded as the completion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tokenmill.backends import BackendOptions, make_backend
from tokenmill.config import SamplingSpec
from tokenmill.errors import TransientError
from tokenmill.records import Prompt

WRONG_SHAPES: dict[str, list[Any]] = {
    "openai-chat": [
        {"choices": [{"index": 0, "message": None}]},
        {"choices": [{"message": "just a string"}]},
        {"choices": [{"message": {"content": 5}}]},
    ],
    "openai-completions": [
        {"choices": [None]},
        {"choices": [{"text": None}]},
        {"choices": [{"text": ["a", "list"]}]},
    ],
    "sglang-generate": [
        {"text": "x", "meta_info": None},
        {"text": "x", "meta_info": []},
        {"text": 7, "meta_info": {}},
    ],
}
CASES = [(api, i) for api, bodies in WRONG_SHAPES.items() for i in range(len(bodies))]


@pytest.fixture
async def answering() -> AsyncIterator[dict[str, Any]]:
    """A loopback server answering every POST with 200 and ``state["body"]``; yields the state (url inside)."""
    state: dict[str, Any] = {"body": {}}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=orjson.dumps(state["body"]), content_type="application/json")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state["url"] = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


@pytest.mark.parametrize(("api", "index"), CASES)
async def test_wrong_shape_is_a_malformed_body(api: str, index: int, answering: dict[str, Any]) -> None:
    answering["body"] = WRONG_SHAPES[api][index]
    backend = make_backend(api, BackendOptions(model="m", sampling=SamplingSpec(max_tokens=4)))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(TransientError, match="malformed response body") as caught:
            await backend.generate(session, answering["url"], Prompt(id="a", text="hello"))
    assert caught.value.retryable and caught.value.server == answering["url"]
