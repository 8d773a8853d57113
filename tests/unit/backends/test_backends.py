"""Backends against a loopback aiohttp server: request bodies, response parsing, error translation, limits."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tokenmill.backends import BackendOptions, make_backend, probe_token_ids
from tokenmill.backends.base import classify_status, error_message
from tokenmill.config import SamplingSpec
from tokenmill.errors import ConfigError, MisconfiguredError, PermanentError, ServerFault, TransientError
from tokenmill.records import Prompt


def options(**kw: Any) -> BackendOptions:
    base: dict[str, Any] = {"model": "m", "sampling": SamplingSpec(max_tokens=7, temperature=0.5, top_k=3)}
    base.update(kw)
    return BackendOptions(**base)


CHAT_OK: dict[str, Any] = {
    "choices": [
        {"message": {"role": "assistant", "content": "hi", "reasoning_content": "why"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1},
}


async def test_chat_body_and_parse(http_server: Any) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["path"] = request.path
        seen["body"] = await request.json()
        seen["auth"] = request.headers.get("Authorization")
        return web.json_response(CHAT_OK)

    url = await http_server(handler)
    backend = make_backend(
        "openai-chat",
        options(api_key="k-1", sampling=SamplingSpec(max_tokens=7, extra_body={"chat_template_kwargs": {"x": 1}})),
    )
    async with aiohttp.ClientSession() as session:
        gen = await backend.generate(session, url, Prompt(id="1", text="hello"))
    assert seen["path"] == "/v1/chat/completions" and seen["auth"] == "Bearer k-1"
    assert seen["body"]["messages"] == [{"role": "user", "content": "hello"}]
    assert seen["body"]["max_tokens"] == 7 and seen["body"]["chat_template_kwargs"] == {"x": 1}
    assert (gen.text, gen.finish_reason, gen.prompt_tokens, gen.completion_tokens) == ("hi", "stop", 4, 1)
    assert gen.reasoning_content == "why"


async def test_generate_body_and_parse(http_server: Any) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["body"] = await request.json()
        meta = {"finish_reason": {"type": "length", "length": 7}, "prompt_tokens": 3, "completion_tokens": 7}
        return web.json_response({"text": "abc", "output_ids": [5, 6], "meta_info": meta})

    url = await http_server(handler)
    backend = make_backend("sglang-generate", options(save_token_ids=True))
    async with aiohttp.ClientSession() as session:
        gen = await backend.generate(session, url, Prompt(id="1", text="t"))
    assert seen["body"]["text"] == "t"
    assert seen["body"]["sampling_params"] == {"max_new_tokens": 7, "temperature": 0.5, "top_k": 3}
    assert gen.finish_reason == "length" and gen.completion_token_ids == [5, 6] and gen.completion_tokens == 7


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, PermanentError),
        (413, PermanentError),
        (500, TransientError),
        (502, TransientError),
        (429, ServerFault),
        (503, ServerFault),
        (401, MisconfiguredError),
        (404, MisconfiguredError),
    ],
)
def test_status_classes(status: int, kind: type) -> None:
    body = orjson.dumps({"object": "error", "message": "prompt is too long", "code": status})
    err = classify_status(status, body, "http://s")
    assert type(err) is kind and "prompt is too long" in err.message and err.status == status


def test_error_message_shapes() -> None:
    assert error_message(b'{"error": {"message": "bad"}}') == "bad"
    assert error_message(b'{"detail": "nope"}') == "nope"
    assert error_message(b"plain text") == "plain text"


async def test_malformed_nested_and_oversized_bodies_are_transient(http_server: Any) -> None:
    async def truncated(request: web.Request) -> web.Response:
        return web.Response(body=b'{"choices": [{"mess', content_type="application/json")

    async def nested(request: web.Request) -> web.Response:
        return web.Response(body=b"[" * 5000 + b"]" * 5000, content_type="application/json")

    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(40):  # chunked, no Content-Length: the limit is enforced while reading
            await resp.write(b"x" * 65536)
        await resp.write_eof()
        return resp

    backend = make_backend("openai-chat", options(max_response_bytes=1 << 20))
    async with aiohttp.ClientSession() as session:
        for handler, needle in ((truncated, "malformed"), (nested, "malformed"), (huge, "limit")):
            url = await http_server(handler)
            with pytest.raises(TransientError, match=needle):
                await backend.generate(session, url, Prompt(id="1", text="x"))


async def test_connection_refused_is_a_server_fault() -> None:
    backend = make_backend("openai-chat", options())
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ServerFault):
            await backend.generate(session, "http://127.0.0.1:9", Prompt(id="1", text="x"))


async def test_token_ids_under_every_name_or_refused(http_server: Any) -> None:
    """vLLM's and SGLang's names for the ids are read; an answer without them is a misconfigured server."""
    answers = {
        "vllm-chat": {**CHAT_OK, "prompt_token_ids": [1, 2], "choices": [{**CHAT_OK["choices"][0], "token_ids": [9]}]},
        "sglang-chat": {
            **CHAT_OK,
            "choices": [{**CHAT_OK["choices"][0], "prompt_token_ids": [1, 2], "response_token_ids": [9]}],
        },
        "old-sglang": CHAT_OK,
    }
    current: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        current["body"] = await request.json()
        return web.json_response(current["answer"])

    url = await http_server(handler)
    backend = make_backend("openai-chat", options(save_token_ids=True))
    async with aiohttp.ClientSession() as session:
        for name in ("vllm-chat", "sglang-chat"):
            current["answer"] = answers[name]
            gen = await backend.generate(session, url, Prompt(id="1", text="hello"))
            assert (gen.prompt_token_ids, gen.completion_token_ids) == ([1, 2], [9]), name
        assert current["body"]["return_token_ids"] is True
        current["answer"] = answers["old-sglang"]
        with pytest.raises(MisconfiguredError, match="without token ids"):
            await backend.generate(session, url, Prompt(id="1", text="hello"))
        # at start: a one-token probe, refused with a ConfigError before anything is generated
        with pytest.raises(ConfigError, match=r"save_token_ids is on.*sglang-generate"):
            await probe_token_ids("openai-chat", options(save_token_ids=True), session, [url])
        assert current["body"]["max_tokens"] == 1
        current["answer"] = answers["sglang-chat"]
        await probe_token_ids("openai-chat", options(save_token_ids=True), session, ["http://127.0.0.1:9", url])


async def test_generate_without_text_names_skip_tokenizer_init(http_server: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "length"}}})

    url = await http_server(handler)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(MisconfiguredError, match="--skip-tokenizer-init"):
            await make_backend("sglang-generate", options()).generate(session, url, Prompt(id="1", text="hi"))
