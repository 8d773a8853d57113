"""Request parsing and response shapes of the three generation APIs, as SGLang speaks them.

Pure functions, no I/O: a JSON body becomes :class:`GenSpec` (or :class:`BadRequest`), and a spec plus its
planned output becomes the response body. Token ids come back as SGLang 0.5.23 returns them: ``/generate``
always has ``output_ids``; ``return_token_ids: true`` on the OpenAI routes puts ``prompt_token_ids`` on the
choice, with the completion's ids as ``response_token_ids`` (chat) or ``token_ids`` (completions).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tokenmill.records import THINK_CLOSE, THINK_OPEN
from tokenmill.sim.text import Draft, estimate_tokens, prompt_token_ids, render_chat

Flavor = Literal["openai", "native"]
NATIVE_DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling_params default for /generate
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # SGLang's CompletionRequest.max_tokens default (chat: the rest of the context)

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


Encode = Callable[[str], list[int]]  # a text's token ids with the model's tokenizer


class BadRequest(Exception):
    """The request cannot be served as sent (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class GenSpec:
    """One generation as the simulator needs it, whichever API it came through."""

    prompt: str | list[int]
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    seed: int | None
    return_ids: bool
    rid: str
    stop: tuple[str, ...] = ()
    penalized: bool = False  # a repetition, frequency or presence penalty was asked for (loops are rarer)
    thinking: bool | None = None  # enable_thinking as the request set it (None: it did not say)
    min_new_tokens: int = 0  # SGLang's min_new_tokens (min_tokens): no end of sequence before that many
    token_ids: tuple[int, ...] = ()  # a text prompt's ids from the model's tokenizer (empty: estimated)

    def prompt_ids(self) -> list[int]:
        if isinstance(self.prompt, list):
            return list(self.prompt)
        return list(self.token_ids) if self.token_ids else prompt_token_ids(self.prompt)


# ---- parsing -------------------------------------------------------------------------------------------


def parse_chat(body: Any, context_length: int, encode: Encode | None = None) -> GenSpec:
    """``POST /v1/chat/completions``; ``encode`` gives a text's token ids (None: its length is estimated)."""
    body = _mapping(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content} objects")
    _reject_unsupported(body)
    text = render_chat(messages)
    limit = _first_int(body, ("max_completion_tokens", "max_tokens"))
    spec = _encoded(_spec(body, text, estimate_tokens(text), limit, context_length, _rid(body.get("rid"))), encode)
    kwargs = body.get("chat_template_kwargs")
    enable = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    return dataclasses.replace(spec, thinking=enable) if isinstance(enable, bool) else spec


def parse_completion(body: Any, context_length: int, encode: Encode | None = None) -> GenSpec:
    """``POST /v1/completions`` with one prompt (a string or a list of token ids)."""
    body = _mapping(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    _reject_unsupported(body)
    limit = _first_int(body, ("max_tokens",))
    limit = COMPLETIONS_DEFAULT_MAX_TOKENS if limit is None else limit
    if isinstance(prompt, str):
        spec = _spec(body, prompt, estimate_tokens(prompt), limit, context_length, _rid(body.get("rid")))
        return _encoded(spec, encode)
    ids = _token_ids(prompt, "prompt")
    return _spec(body, ids, len(ids), limit, context_length, _rid(body.get("rid")))


def parse_generate(body: Any, context_length: int, encode: Encode | None = None) -> tuple[list[GenSpec], bool]:
    """``POST /generate``: the specs, and whether the request was a batch (answered with a list)."""
    body = _mapping(body)
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise BadRequest("Either text or input_ids should be provided, not both or neither.")
    prompts: list[str | list[int]]
    if text is not None:
        batch = isinstance(text, list)
        texts = text if batch else [text]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise BadRequest("text must be a string or a non-empty list of strings")
        prompts = list(texts)
    else:
        batch = isinstance(input_ids, list) and bool(input_ids) and isinstance(input_ids[0], list)
        prompts = [_token_ids(p, "input_ids") for p in (input_ids if batch else [input_ids])]
    params = body.get("sampling_params") or {}
    per_item = params if isinstance(params, list) else [params] * len(prompts)
    rids = body.get("rid")
    rid_list = rids if isinstance(rids, list) else [rids] * len(prompts)
    if len(per_item) != len(prompts) or len(rid_list) != len(prompts):
        raise BadRequest("sampling_params and rid lists must have one entry per prompt")
    specs = []
    for prompt, sp, rid in zip(prompts, per_item, rid_list, strict=True):
        sp = _mapping(sp, "sampling_params")
        if sp.get("n", 1) != 1:
            raise BadRequest("n > 1 is not supported by the simulated server; send one request per sample")
        limit = _first_int(sp, ("max_new_tokens",))
        n_tokens = estimate_tokens(prompt) if isinstance(prompt, str) else len(prompt)
        spec = _spec(
            sp,
            prompt,
            n_tokens,
            NATIVE_DEFAULT_MAX_NEW_TOKENS if limit is None else limit,
            context_length,
            _rid(rid),
            seed_key="sampling_seed",
            return_ids=False,
        )
        specs.append(_encoded(spec, encode))
    if body.get("stream"):
        raise BadRequest("stream is not supported by the simulated server; send stream: false")
    return specs, batch


def check_context(spec: GenSpec, context_length: int) -> None:
    """SGLang's length check: prompt plus max_new_tokens must fit in the context (HTTP 400)."""
    if spec.prompt_tokens >= context_length:
        raise BadRequest(
            f"The input ({spec.prompt_tokens} tokens) is longer than the model's context length "
            f"({context_length} tokens)."
        )
    total = spec.prompt_tokens + spec.max_new_tokens
    if total > context_length:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
            f"You requested a total of {total} tokens: {spec.prompt_tokens} tokens from the input messages "
            f"and {spec.max_new_tokens} tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit."
        )


def _mapping(body: Any, what: str = "the request body") -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return body


def _reject_unsupported(body: Mapping[str, Any]) -> None:
    if body.get("stream"):
        raise BadRequest("stream is not supported by the simulated server; send stream: false")
    if body.get("n", 1) != 1:
        raise BadRequest("n > 1 is not supported by the simulated server; send one request per sample")


def _first_int(body: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequest(f"{key} must be a non-negative integer, got {value!r}")
        return value
    return None


def _token_ids(value: Any, field: str) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):
        raise BadRequest(f"{field} must be a string or a non-empty list of non-negative token ids")
    return value


def _rid(value: Any) -> str:
    return value if isinstance(value, str) and value else uuid.uuid4().hex


def _spec(
    params: Mapping[str, Any],
    prompt: str | list[int],
    prompt_tokens: int,
    limit: int | None,
    context_length: int,
    rid: str,
    *,
    seed_key: str = "seed",
    return_ids: bool | None = None,
) -> GenSpec:
    seed = params.get(seed_key)
    # a client-side chat template with thinking off ends the prompt with an empty thinking block (Qwen3's)
    closed = isinstance(prompt, str) and prompt.rstrip().endswith(THINK_CLOSE)
    stop = params.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(x for x in stop if isinstance(x, str)) if stop else ()
    return GenSpec(
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        # OpenAI requests without a limit may use the rest of the context (SGLang clamps the same way)
        max_new_tokens=max(0, context_length - prompt_tokens) if limit is None else limit,
        ignore_eos=bool(params.get("ignore_eos", False)),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        return_ids=bool(params.get("return_token_ids", False)) if return_ids is None else return_ids,
        rid=rid,
        stop=stops if isinstance(stop, str | list) else (),
        penalized=_penalized(params),
        thinking=False if closed else None,
        min_new_tokens=_min_new_tokens(params),
    )


def _encoded(spec: GenSpec, encode: Encode | None) -> GenSpec:
    """``spec`` with its text prompt's ids and length from the model's tokenizer, when there is one."""
    if encode is None or not isinstance(spec.prompt, str):
        return spec
    ids = tuple(encode(spec.prompt))
    return dataclasses.replace(spec, prompt_tokens=len(ids), token_ids=ids)


def _min_new_tokens(params: Mapping[str, Any]) -> int:
    """``min_new_tokens`` (/generate) or ``min_tokens`` (OpenAI routes); 0 when absent or not a count."""
    value = params.get("min_new_tokens", params.get("min_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _penalized(params: Mapping[str, Any]) -> bool:
    """Whether the sampling parameters penalize repeats (SGLang's names, OpenAI routes and /generate alike)."""
    rep, freq, pres = (params.get(k) for k in ("repetition_penalty", "frequency_penalty", "presence_penalty"))
    number = (int, float)
    return (
        (isinstance(rep, number) and rep > 1)
        or (isinstance(freq, number) and freq > 0)
        or (isinstance(pres, number) and pres > 0)
    )


# ---- responses -----------------------------------------------------------------------------------------


def _usage(spec: GenSpec, draft: Draft) -> dict[str, Any]:
    n = len(draft.token_ids)
    return {
        "prompt_tokens": spec.prompt_tokens,
        "total_tokens": spec.prompt_tokens + n,
        "completion_tokens": n,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def split_reasoning(text: str, parser: str | None, thinking: bool | None) -> tuple[str | None, str]:
    """(reasoning_content, content) as SGLang's reasoning parser splits a whole answer (non-streaming): without a
    parser the text stays whole; ``qwen3`` reads everything before ``</think>`` as reasoning unless the request set
    enable_thinking false (a template without a thinking switch, like the tiny test models', forces it), and
    ``qwen3-thinking`` and ``deepseek-r1`` always do; with no ``</think>`` the whole text is reasoning (cut off),
    and the content is empty. Leading ``<think>`` tags are dropped; an empty reasoning is None."""
    if parser is None:
        return None, text
    forced = parser != "qwen3" or thinking is not False
    if not forced and THINK_OPEN not in text:
        return None, text
    body = text
    while body.startswith(THINK_OPEN):
        body = body[len(THINK_OPEN) :]
    reasoning, closed, content = body.partition(THINK_CLOSE)
    if not closed:
        reasoning, content = body, ""
    return reasoning or None, content


def chat_response(spec: GenSpec, draft: Draft, model: str, reasoning_parser: str | None = None) -> dict[str, Any]:
    reasoning, content = split_reasoning(draft.text, reasoning_parser, spec.thinking)
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": None},
        "logprobs": None,
        "finish_reason": draft.finish,
        "matched_stop": draft.matched,
    }
    if spec.return_ids:
        choice["prompt_token_ids"] = spec.prompt_ids()
        choice["response_token_ids"] = draft.token_ids
    out: dict[str, Any] = {
        "id": spec.rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(spec, draft),
    }
    return out


def completion_response(spec: GenSpec, draft: Draft, model: str) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "text": draft.text,
        "logprobs": None,
        "finish_reason": draft.finish,
        "matched_stop": draft.matched,
    }
    if spec.return_ids:
        choice["prompt_token_ids"] = spec.prompt_ids()
        choice["token_ids"] = draft.token_ids
    return {
        "id": spec.rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(spec, draft),
    }


def generate_item(spec: GenSpec, draft: Draft, e2e_latency: float, cached_tokens: int = 0) -> dict[str, Any]:
    n = len(draft.token_ids)
    finish: dict[str, Any] = (
        {"type": "stop", "matched": draft.matched} if draft.finish == "stop" else {"type": "length", "length": n}
    )
    item: dict[str, Any] = {
        "text": draft.text,
        "output_ids": draft.token_ids,
        "meta_info": {
            "id": spec.rid,
            "finish_reason": finish,
            "prompt_tokens": spec.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "completion_tokens": n,
            "cached_tokens": cached_tokens,
            "reasoning_tokens": 0,
            "e2e_latency": e2e_latency,
        },
    }
    return item


def error_body(flavor: Flavor, status: int, message: str) -> dict[str, Any]:
    """SGLang's error shapes: OpenAI ``ErrorResponse`` objects, or ``{"error": {"message"}}`` natively."""
    if flavor == "native":
        return {"error": {"message": message}}
    return {
        "object": "error",
        "message": message,
        "type": _ERROR_TYPES.get(status, "InternalServerError"),
        "param": None,
        "code": status,
    }
