"""The simulated server's generation routes: a fault drawn, the request parsed, the answer planned and run through
the engine (as the twin's SGLang limits allow), and the response shaped as the API it came in on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from tokenmill.config import SimSpec
from tokenmill.sim import api
from tokenmill.sim.engine import EngineClosedError, QueueFullError, SimEngine, Timing
from tokenmill.sim.faults import FaultInjector
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.text import Draft, content_key, degeneration, degeneration_rates, plan_output
from tokenmill.sim.tokenize import Encoder
from tokenmill.sim.twin import TwinStepModel

_Serve = Callable[[Any], Awaitable[Any]]


class Generation:
    """``/v1/chat/completions``, ``/v1/completions`` and ``/generate`` over one engine (faults apply here only)."""

    def __init__(
        self,
        cfg: SimSpec,
        engine: SimEngine,
        faults: FaultInjector,
        *,
        twin: TwinStepModel | None,
        prefix_cache: PrefixCache | None,
        encode: Encoder | None,
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.faults = faults
        self.twin = twin
        self.prefix_cache = prefix_cache
        self._encode = encode  # the model's tokenizer when its directory has one
        self.closing: asyncio.Event | None = None  # set by the server when it stops: stalled requests end

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generation(request, "openai", self._serve_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generation(request, "openai", self._serve_completion)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._generation(request, "native", self._serve_generate)

    async def _generation(self, request: web.Request, flavor: api.Flavor, serve: _Serve) -> web.StreamResponse:
        fault = self.faults.draw()
        if fault == "error":
            return error_response(flavor, 500, "Internal server error (injected by tokenmill sim).")
        if fault == "rate_limit":
            resp = error_response(flavor, 429, "Too many requests (injected by tokenmill sim); retry later.")
            resp.headers["Retry-After"] = "1"
            return resp
        if fault == "drop":
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500)  # never reaches the client: the connection is gone
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return error_response(flavor, 400, f"The request body is not valid JSON: {exc}")
        if fault == "stall":
            await self._stall()
        try:
            payload = await serve(body)
        except api.BadRequest as exc:
            return error_response(flavor, 400, str(exc))
        except QueueFullError:
            return error_response(flavor, 503, "The request queue is full.")
        except EngineClosedError:
            return error_response(flavor, 503, "The server is shutting down; retry on another server.")
        data = orjson.dumps(payload)
        if fault == "malformed":
            data = data[: len(data) // 2]
        return web.Response(body=data, content_type="application/json")

    async def _stall(self) -> None:
        assert self.closing is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.closing.wait(), timeout=self.faults.spec.stall_s)

    async def _run(self, spec: api.GenSpec) -> tuple[Draft, Timing, int]:
        """Serve one spec: the planned answer, where its time went, and the prompt tokens the cache served."""
        cfg = self.cfg
        max_new = spec.max_new_tokens
        if self.twin is not None:
            limit = self.twin.max_req_input_len
            if spec.prompt_tokens > limit:
                raise api.BadRequest(
                    f"Input length ({spec.prompt_tokens} tokens) exceeds the maximum allowed length ({limit} "
                    "tokens). Use a shorter input or enable --allow-auto-truncate."
                )
            max_new = self.twin.max_new_tokens(spec.prompt_tokens, max_new)
        key = content_key(cfg.seed, spec.prompt, spec.seed, spec.penalized)
        draft = plan_output(
            key,
            max_new,
            # a min_new_tokens at the limit runs to it (a shorter one is not modeled: the drawn length stands)
            ignore_eos=spec.ignore_eos or spec.min_new_tokens >= max_new > 0,
            mean=cfg.output_len_mean,
            sigma=cfg.output_len_sigma,
            stop=spec.stop,
            degeneration=degeneration(key, degeneration_rates(cfg, spec.penalized)),
            think_share=cfg.reasoning_share if thinks(cfg, spec) else None,
        )
        ids = spec.prompt_ids() if self.prefix_cache is not None else []
        timing = await self.engine.generate(
            spec.prompt_tokens,
            len(draft.token_ids),
            max_new,
            ignore_eos=spec.ignore_eos,
            prompt_ids=ids,
            output_ids=draft.token_ids,
        )
        return draft, timing, timing.cached_tokens

    def _model_name(self, body: Any) -> str:
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) and model else self.cfg.model

    async def _serve_chat(self, body: Any) -> Any:
        spec = api.parse_chat(body, self.cfg.context_length, self._encode)
        api.check_context(spec, self.cfg.context_length)
        draft, _, _ = await self._run(spec)
        return api.chat_response(spec, draft, self._model_name(body), self.cfg.reasoning_parser)

    async def _serve_completion(self, body: Any) -> Any:
        spec = api.parse_completion(body, self.cfg.context_length, self._encode)
        api.check_context(spec, self.cfg.context_length)
        draft, _, _ = await self._run(spec)
        return api.completion_response(spec, draft, self._model_name(body))

    async def _serve_generate(self, body: Any) -> Any:
        specs, batch = api.parse_generate(body, self.cfg.context_length, self._encode)
        for spec in specs:
            api.check_context(spec, self.cfg.context_length)
        if len(specs) == 1:
            results = [await self._run(specs[0])]
        else:
            # the batch's items reach the engine's inbox together: SGLang receives them at once
            tasks = [asyncio.ensure_future(self._run(s)) for s in specs]
            try:
                results = await asyncio.gather(*tasks)
            finally:  # one refused or failed: the rest of the batch is aborted, not left running
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        items = [api.generate_item(s, d, t.e2e_s, c) for s, (d, t, c) in zip(specs, results, strict=True)]
        for item, (_, timing, _) in zip(items, results, strict=True):
            item["meta_info"]["num_retractions"] = timing.retractions
        return items if batch else items[0]


def thinks(cfg: SimSpec, spec: api.GenSpec) -> bool:
    """Whether an answer opens with a thinking block: a thinking model's, unless the request turned thinking off
    and the model's template honours the switch."""
    return cfg.thinking and (spec.thinking is not False or not cfg.thinking_switch)


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


def error_response(flavor: api.Flavor, status: int, message: str) -> web.Response:
    return json_response(api.error_body(flavor, status, message), status)
