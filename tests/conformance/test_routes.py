"""/health, /v1/models and /generate: the shapes tokenmill's backends and probes read."""

from __future__ import annotations

import re

import aiohttp
import pytest

from tests.engines.pool import LiveServer
from tests.helpers.conformance import OPENAI, generate, get_json, post, stop_string

CONTEXT_ERROR = re.compile(r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)\.")


@pytest.mark.parametrize("server", OPENAI, indirect=True)
async def test_health_answers_200(http: aiohttp.ClientSession, server: LiveServer) -> None:
    async with http.get(server.base_url + "/health") as resp:
        assert resp.status == 200


@pytest.mark.parametrize("server", OPENAI, indirect=True)
async def test_models_lists_the_served_model_and_its_context(http: aiohttp.ClientSession, server: LiveServer) -> None:
    body = await get_json(http, server, "/v1/models")
    assert body["object"] == "list"
    (card,) = body["data"]
    assert (card["id"], card["object"]) == (server.model, "model")
    assert card["max_model_len"] == server.max_model_len


async def test_generate_text_reports_length_finish_and_counts(http: aiohttp.ClientSession, server: LiveServer) -> None:
    body = await generate(http, server, "Tell me about the world.", 12, ignore_eos=True, temperature=0)
    assert isinstance(body["text"], str)
    ids = body["output_ids"]
    assert len(ids) == 12 and all(isinstance(i, int) for i in ids)
    meta = body["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["completion_tokens"] == 12
    assert isinstance(meta["prompt_tokens"], int) and meta["prompt_tokens"] > 0
    assert isinstance(meta["id"], str) and meta["id"]
    assert isinstance(meta["cached_tokens"], int) and meta["cached_tokens"] >= 0
    assert isinstance(meta["num_retractions"], int)
    assert isinstance(meta["e2e_latency"], float) and meta["e2e_latency"] > 0


async def test_generate_input_ids_counts_the_ids_sent(http: aiohttp.ClientSession, server: LiveServer) -> None:
    ids = [5, 6, 7, 8, 9, 10, 11]
    status, body = await post(
        http, server, "/generate", input_ids=ids, sampling_params={"max_new_tokens": 5, "ignore_eos": True}
    )
    assert status == 200, body
    assert body["meta_info"]["prompt_tokens"] == len(ids)
    assert len(body["output_ids"]) == body["meta_info"]["completion_tokens"] == 5


async def test_generate_stop_string_cuts_the_text_and_names_the_match(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    greedy = {"temperature": 0, "ignore_eos": True}
    full = await generate(http, server, "Hello there, world", 24, **greedy)
    text = full["text"]
    stop = stop_string(text)
    cut = await generate(http, server, "Hello there, world", 24, stop=[stop], **greedy)
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert cut["text"] == text[: text.index(stop)]
    assert cut["meta_info"]["completion_tokens"] == len(cut["output_ids"]) < 24


async def test_generate_prompt_over_the_context_is_a_400_with_the_lengths(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    status, body = await post(
        http, server, "/generate", text="the world and the people " * 600, sampling_params={"max_new_tokens": 8}
    )
    assert status == 400, body
    match = CONTEXT_ERROR.fullmatch(body["error"]["message"])
    assert match, body
    assert int(match[1]) > server.max_model_len and int(match[2]) == server.max_model_len
