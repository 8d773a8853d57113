"""Request parsing and response shapes of the simulated server's three generation APIs."""

from __future__ import annotations

from typing import Any

import pytest

from tokenmill.sim import api
from tokenmill.sim.text import EOS_TOKEN_ID, Draft, estimate_tokens, prompt_token_ids, render_chat

CTX = 1000
STOP = Draft(token_ids=[1001, 1002], text="bab bac", finish="stop", matched=EOS_TOKEN_ID)
LENGTH = Draft(token_ids=[1003], text="bad", finish="length")


def test_chat_counts_the_rendered_prompt_and_defaults_to_the_rest_of_the_context() -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "hello"}]
    spec = api.parse_chat({"messages": messages}, CTX)
    n = estimate_tokens(render_chat(messages))
    assert spec.prompt_tokens == n
    assert spec.max_new_tokens == CTX - n
    assert api.parse_chat({"messages": messages, "max_tokens": 7}, CTX).max_new_tokens == 7
    assert api.parse_chat({"messages": messages, "max_completion_tokens": 9, "max_tokens": 7}, CTX).max_new_tokens == 9


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": "hi"},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": True},
        {"messages": [{"role": "user", "content": "x"}], "n": 2},
        {"messages": [{"role": "user", "content": "x"}], "stream": True},
        ["not", "an", "object"],
    ],
)
def test_bad_chat_requests_are_refused(body: Any) -> None:
    with pytest.raises(api.BadRequest):
        api.parse_chat(body, CTX)


def test_completion_takes_text_or_token_ids() -> None:
    assert api.parse_completion({"prompt": "abcdefgh"}, CTX).prompt_tokens == 2
    assert api.parse_completion({"prompt": ["abcdefgh"]}, CTX).prompt_tokens == 2
    ids = api.parse_completion({"prompt": [5, 6, 7], "max_tokens": 3}, CTX)
    assert (ids.prompt_tokens, ids.prompt_ids(), ids.max_new_tokens) == (3, [5, 6, 7], 3)
    with pytest.raises(api.BadRequest):
        api.parse_completion({"prompt": ["a", "b"]}, CTX)


def test_generate_defaults_to_128_new_tokens_and_reads_sampling_params() -> None:
    [spec], batch = api.parse_generate({"text": "hi"}, CTX)
    assert (spec.max_new_tokens, batch, spec.ignore_eos) == (128, False, False)
    [spec], _ = api.parse_generate(
        {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 5, "ignore_eos": True, "sampling_seed": 4}}, CTX
    )
    assert (spec.prompt_tokens, spec.max_new_tokens, spec.ignore_eos, spec.seed) == (2, 5, True, 4)


def test_generate_batches() -> None:
    specs, batch = api.parse_generate({"text": ["a", "b"], "rid": ["r1", "r2"]}, CTX)
    assert batch
    assert [s.rid for s in specs] == ["r1", "r2"]
    specs, batch = api.parse_generate({"input_ids": [[1], [2, 3]], "sampling_params": [{}, {"max_new_tokens": 1}]}, CTX)
    assert batch
    assert [s.max_new_tokens for s in specs] == [128, 1]


@pytest.mark.parametrize(
    "body",
    [{}, {"text": "a", "input_ids": [1]}, {"input_ids": [-1]}, {"text": 3}, {"text": ["a"], "rid": ["x", "y"]}],
)
def test_bad_generate_requests_are_refused(body: Any) -> None:
    with pytest.raises(api.BadRequest):
        api.parse_generate(body, CTX)


def test_context_check_words_its_error_like_sglang() -> None:
    ok = api.parse_completion({"prompt": "x" * 40, "max_tokens": 990}, CTX)
    api.check_context(ok, CTX)
    too_long = api.parse_completion({"prompt": "x" * 40, "max_tokens": 991}, CTX)
    with pytest.raises(api.BadRequest, match=r"maximum context length of 1000 tokens.*total of 1001 tokens: 10"):
        api.check_context(too_long, CTX)
    huge = api.parse_completion({"prompt": "x" * 4000, "max_tokens": 0}, CTX)
    with pytest.raises(api.BadRequest, match=r"The input \(1000 tokens\) is longer"):
        api.check_context(huge, CTX)


def test_chat_response_shape() -> None:
    spec = api.parse_chat({"messages": [{"role": "user", "content": "hi"}], "rid": "abc"}, CTX)
    out = api.chat_response(spec, STOP, "m")
    assert out["id"] == "abc"
    assert out["object"] == "chat.completion"
    assert out["model"] == "m"
    assert isinstance(out["created"], int)
    choice = out["choices"][0]
    message = {"role": "assistant", "content": "bab bac", "reasoning_content": None, "tool_calls": None}
    assert choice["message"] == message
    assert (choice["finish_reason"], choice["matched_stop"]) == ("stop", EOS_TOKEN_ID)
    assert out["usage"]["prompt_tokens"] == spec.prompt_tokens
    assert out["usage"]["completion_tokens"] == 2
    assert out["usage"]["total_tokens"] == spec.prompt_tokens + 2
    assert "prompt_token_ids" not in out and "prompt_token_ids" not in choice
    assert "response_token_ids" not in choice


def test_return_token_ids_follows_sglang() -> None:
    chat = api.parse_chat({"messages": [{"role": "user", "content": "hi"}], "return_token_ids": True}, CTX)
    out = api.chat_response(chat, LENGTH, "m")
    choice = out["choices"][0]
    assert choice["prompt_token_ids"] == prompt_token_ids(render_chat([{"role": "user", "content": "hi"}]))
    assert choice["response_token_ids"] == [1003]
    assert "prompt_token_ids" not in out
    assert (choice["finish_reason"], choice["matched_stop"]) == ("length", None)
    comp = api.parse_completion({"prompt": [9, 8], "return_token_ids": True}, CTX)
    choice = api.completion_response(comp, STOP, "m")["choices"][0]
    assert (choice["prompt_token_ids"], choice["token_ids"], choice["text"]) == ([9, 8], [1001, 1002], "bab bac")


def test_generate_item_shape() -> None:
    [spec], _ = api.parse_generate({"text": "hi", "rid": "r"}, CTX)
    item = api.generate_item(spec, LENGTH, 0.5)
    assert item["text"] == "bad"
    assert item["output_ids"] == [1003]
    assert "input_ids" not in item  # SGLang answers with the output ids only
    meta = item["meta_info"]
    assert meta["id"] == "r"
    assert meta["finish_reason"] == {"type": "length", "length": 1}
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (1, 1, 0)
    assert meta["e2e_latency"] == 0.5
    stop = api.generate_item(spec, STOP, 0.1)["meta_info"]["finish_reason"]
    assert stop == {"type": "stop", "matched": EOS_TOKEN_ID}


def test_error_bodies() -> None:
    assert api.error_body("openai", 400, "bad") == {
        "object": "error",
        "message": "bad",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert api.error_body("native", 503, "full") == {"error": {"message": "full"}}
