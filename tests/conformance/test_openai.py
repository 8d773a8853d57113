"""The OpenAI routes: usage, finish reasons, stop strings, reasoning fields and token ids, read through
tokenmill's own backends where tokenmill reads them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.engines.pool import LiveServer
from tests.helpers.conformance import OPENAI, post, stop_string
from tokenmill.backends.base import BackendOptions, make_backend
from tokenmill.config import SamplingSpec
from tokenmill.records import Prompt

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PROMPT = "Tell me about the world."
ROUTES = {CHAT: "openai-chat", COMPLETIONS: "openai-completions"}


def prompt_body(route: str, text: str = PROMPT) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]} if route == CHAT else {"prompt": text}


def text_of(route: str, choice: dict[str, Any]) -> str:
    return str(choice["message"]["content"] if route == CHAT else choice["text"])


@pytest.mark.parametrize("server", OPENAI, indirect=True)
@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_usage_and_length_finish(http: aiohttp.ClientSession, server: LiveServer, route: str) -> None:
    status, body = await post(http, server, route, **prompt_body(route), max_tokens=9, ignore_eos=True)
    assert status == 200, body
    assert body["object"] == ("chat.completion" if route == CHAT else "text_completion")
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 9
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + 9


@pytest.mark.parametrize("server", OPENAI, indirect=True)
@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_token_ids_reach_tokenmill_records(http: aiohttp.ClientSession, server: LiveServer, route: str) -> None:
    """``save_token_ids``: tokenmill's backend asks for ids and finds them, whatever the server calls them."""
    backend = make_backend(
        ROUTES[route],
        BackendOptions(
            model=server.model,
            sampling=SamplingSpec(max_tokens=7, temperature=0, extra_body={"ignore_eos": True}),
            save_token_ids=True,
        ),
    )
    gen = await backend.generate(http, server.base_url, Prompt(id="p", text=PROMPT))
    assert gen.completion_token_ids is not None and len(gen.completion_token_ids) == gen.completion_tokens == 7
    assert gen.prompt_token_ids is not None and len(gen.prompt_token_ids) == gen.prompt_tokens


@pytest.mark.parametrize("server", OPENAI, indirect=True)
@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_an_answer_that_ends_by_itself_ends_with_the_eos_id(
    http: aiohttp.ClientSession, server: LiveServer, route: str
) -> None:
    """The ids of an answer that stopped at the end of sequence include that token, and the usage counts it (what
    a token export supervises as the end of the turn); an answer cut at max_tokens has none."""
    eos = json.loads((server.model_dir / "config.json").read_text())["eos_token_id"]
    backend = make_backend(
        ROUTES[route],
        BackendOptions(
            model=server.model,
            sampling=SamplingSpec(max_tokens=400, temperature=1.0, extra_body={"logit_bias": {str(eos): 6.0}}),
            save_token_ids=True,
        ),
    )
    gens = await asyncio.gather(
        *(backend.generate(http, server.base_url, Prompt(id=f"p{i}", text=f"{PROMPT} {i}")) for i in range(6))
    )
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped, [g.finish_reason for g in gens]
    for g in gens:
        ids = g.completion_token_ids
        assert ids is not None and len(ids) == g.completion_tokens
        assert (ids[-1] == eos) == (g.finish_reason == "stop"), (g.finish_reason, ids[-3:])


@pytest.mark.parametrize("server", OPENAI, indirect=True)
async def test_token_ids_are_absent_unless_asked_for(http: aiohttp.ClientSession, server: LiveServer) -> None:
    status, body = await post(http, server, COMPLETIONS, prompt=PROMPT, max_tokens=2, ignore_eos=True)
    assert status == 200, body
    (choice,) = body["choices"]
    assert not choice.get("token_ids") and not choice.get("prompt_token_ids") and not body.get("prompt_token_ids")


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_stop_string_finishes_with_stop_and_names_it(
    http: aiohttp.ClientSession, server: LiveServer, route: str
) -> None:
    greedy: dict[str, Any] = {**prompt_body(route), "max_tokens": 24, "ignore_eos": True, "temperature": 0}
    status, full = await post(http, server, route, **greedy)
    assert status == 200, full
    text = text_of(route, full["choices"][0])
    stop = stop_string(text)
    status, body = await post(http, server, route, **greedy, stop=[stop])
    assert status == 200, body
    (choice,) = body["choices"]
    assert (choice["finish_reason"], choice["matched_stop"]) == ("stop", stop)
    assert text_of(route, choice) == text[: text.index(stop)]
    assert body["usage"]["completion_tokens"] < 24


async def test_chat_message_carries_a_reasoning_field(http: aiohttp.ClientSession, server: LiveServer) -> None:
    """SGLang always has ``reasoning_content`` on the message (null without --reasoning-parser)."""
    status, body = await post(http, server, CHAT, **prompt_body(CHAT), max_tokens=3)
    assert status == 200, body
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and "reasoning_content" in message


@pytest.mark.parametrize("server", OPENAI, indirect=True)
async def test_completions_without_max_tokens_generate_16(http: aiohttp.ClientSession, server: LiveServer) -> None:
    status, body = await post(http, server, COMPLETIONS, prompt=PROMPT, ignore_eos=True)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_prompt_over_the_context_is_a_400(http: aiohttp.ClientSession, server: LiveServer, route: str) -> None:
    status, body = await post(
        http, server, route, **prompt_body(route, "the world and the people " * 600), max_tokens=4
    )
    assert status == 400, body
    assert body["object"] == "error" and body["code"] == 400 and body["type"] == "BadRequestError"
    assert f"longer than the model's context length ({server.max_model_len} tokens)" in body["message"]


async def test_prompt_plus_max_tokens_over_the_context_is_a_400(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    status, body = await post(http, server, COMPLETIONS, prompt=PROMPT, max_tokens=server.max_model_len + 100)
    assert status == 400, body
    assert body["message"].startswith(
        f"Requested token count exceeds the model's maximum context length of {server.max_model_len} tokens."
    )
