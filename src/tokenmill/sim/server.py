"""The simulated SGLang server: an aiohttp app over a :class:`~tokenmill.sim.engine.SimEngine`.

Routes (SGLang's, plus ``/sim/*`` which exist only here)::

    POST /v1/chat/completions, /v1/completions, /generate     generation (faults apply here only)
    GET  /v1/models[/{model}], /model_info, /server_info       descriptions (+ deprecated /get_* aliases)
    GET  /health, /health_generate                             200 at once; 503 while stopping
    GET  /metrics                                              Prometheus text, ``sglang:`` names
    GET|POST /sim/faults                                       read / replace the FaultSpec (JSON body)
    POST /sim/pause, /sim/resume                               freeze / continue the scheduler

With ``SimSpec.api_key`` set, every route except ``/health*``, ``/ready*`` and ``/metrics`` needs
``Authorization: Bearer <key>`` (or ``x-api-key``) and answers 401 ``{"error": "Unauthorized"}``
otherwise, as SGLang does. A client that hangs up aborts its request and frees its slot.

With ``SimSpec.gpu`` set the server is the twin (:mod:`tokenmill.sim.twin`): pools, admission and step
times come from the capacity planner for ``model_spec`` (else ``model``) with ``engine_flags``; the context
length, max running and KV pool it reports are the ones the planner sized, and, as SGLang, it refuses
prompts longer than ``max_req_input_len`` and trims ``max_new_tokens`` to what the KV pool can hold.

In-process use::

    async with SimServer(SimSpec(time_scale=0.01)) as srv:
        ...  # talk to srv.url
    async with SimServer(SimSpec(gpu="rtx-pro-6000", model="qwen3.6-27b", time_scale=0.01)) as twin:
        ...
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from tokenmill.config import FaultSpec, SimSpec, format_validation_error
from tokenmill.errors import ConfigError
from tokenmill.sim import info
from tokenmill.sim.engine import SimEngine, default_step_model
from tokenmill.sim.faults import FaultInjector
from tokenmill.sim.generation import Generation, error_response, json_response
from tokenmill.sim.metrics import SimCollector, exposition, make_registry
from tokenmill.sim.prefix import PrefixCache
from tokenmill.sim.timing import StepModel
from tokenmill.sim.tokenize import prompt_encoder
from tokenmill.sim.twin import TwinStepModel

_OPEN_PREFIXES = ("/health", "/ready", "/metrics")


class SimServer:
    """One simulated server bound to ``cfg.host:cfg.port`` (port 0: any free port; read ``url``)."""

    def __init__(self, cfg: SimSpec | None = None, *, step_model: StepModel | None = None) -> None:
        self.cfg = cfg if cfg is not None else SimSpec()
        model = step_model if step_model is not None else default_step_model(self.cfg)
        self.twin = model if isinstance(model, TwinStepModel) else None
        if self.twin is not None:
            self.cfg = self.twin.resolve(self.cfg)
        self.faults = FaultInjector(self.cfg.faults)
        self._encode = prompt_encoder(self.cfg.model_spec)  # the model's tokenizer when its directory has one
        cache_tokens = self.twin.prefix_cache_tokens if self.twin is not None else 0
        hybrid = self.twin is not None and self.twin.is_hybrid
        self.prefix_cache = PrefixCache(cache_tokens, states=hybrid) if cache_tokens and not self.cfg.instant else None
        self.engine = SimEngine(self.cfg, model, self.prefix_cache)  # the scheduler matches and fills the cache
        self.generation = Generation(
            self.cfg, self.engine, self.faults, twin=self.twin, prefix_cache=self.prefix_cache, encode=self._encode
        )
        self._registry = make_registry(
            SimCollector(
                self.cfg.model,
                self.engine.model,
                self.cfg.context_length,
                self.engine.published,  # gauges as the scheduler last wrote them, as SGLang's
                self.engine.metrics,
                lambda: self.faults.counts,
                lambda: self.prefix_cache.states if self.prefix_cache is not None else 0,
            )
        )
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None
        self._created = int(time.time())
        self.port = 0
        self.url = ""

    async def start(self) -> str:
        """Bind and serve; returns the base URL (``http://127.0.0.1:PORT``)."""
        self._closing = self.generation.closing = asyncio.Event()
        await self.engine.start()
        runner = web.AppRunner(self._app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, self.cfg.host, self.cfg.port, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            await self.engine.close()
            raise ConfigError(
                f"cannot listen on {self.cfg.host}:{self.cfg.port}: {exc.strerror or exc} "
                "(pick another --port, or 0 for any free port)"
            ) from exc
        self._runner = runner
        host, self.port = runner.addresses[0][:2]
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        """Stop serving: stalled and running requests end with 503, then the socket closes."""
        if self._closing is not None:
            self._closing.set()
        await self.engine.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def set_faults(self, spec: FaultSpec) -> None:
        """Replace the fault spec while running (raises ConfigError if the rates sum past 1)."""
        self.faults.update(spec)

    # ---- app -----------------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        middlewares = [self._auth_middleware()] if self.cfg.api_key else []
        app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
        post, get = web.post, web.get
        app.add_routes(
            [
                post("/v1/chat/completions", self.generation.chat),
                post("/v1/completions", self.generation.completions),
                post("/generate", self.generation.generate),
                post("/flush_cache", self._flush_cache),
                get("/v1/models", self._models),
                get("/v1/models/{model}", self._model_card),
                get("/model_info", self._model_info),
                get("/get_model_info", self._model_info),
                get("/server_info", self._server_info),
                get("/get_server_info", self._server_info),
                get("/health", self._health),
                get("/health_generate", self._health),
                get("/metrics", self._metrics),
                get("/sim/faults", self._get_faults),
                post("/sim/faults", self._set_faults),
                post("/sim/pause", self._pause),
                post("/sim/resume", self._resume),
            ]
        )
        return app

    def _auth_middleware(self) -> Any:
        key = self.cfg.api_key or ""

        @web.middleware
        async def auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
            if not request.path.startswith(_OPEN_PREFIXES) and not _authorized(request, key):
                return json_response({"error": "Unauthorized"}, 401)
            return await handler(request)

        return auth

    # ---- descriptions, health, metrics ---------------------------------------------------------------

    async def _flush_cache(self, request: web.Request) -> web.StreamResponse:
        """SGLang's ``/flush_cache``: empties the prefix cache when nothing runs or waits (else 400)."""
        snap = self.engine.snapshot()
        if snap.running or snap.waiting:
            return web.Response(status=400, text="Cache not flushed because there are pending requests.")
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.")

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return json_response({"object": "list", "data": [info.model_card(self.cfg, self._created)]})

    async def _model_card(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["model"] != self.cfg.model:
            return error_response("openai", 404, f"The model `{request.match_info['model']}` does not exist.")
        return json_response(info.model_card(self.cfg, self._created))

    async def _model_info(self, request: web.Request) -> web.StreamResponse:
        return json_response(info.model_info(self.cfg))

    async def _server_info(self, request: web.Request) -> web.StreamResponse:
        snap = self.engine.snapshot()
        return json_response(info.server_info(self.cfg, self.engine.model, snap, self.cfg.host, self.port))

    async def _health(self, request: web.Request) -> web.StreamResponse:
        closing = self._closing is not None and self._closing.is_set()
        return web.Response(status=503 if closing else 200)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=exposition(self._registry), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    # ---- simulator control ---------------------------------------------------------------------------

    def _faults_body(self) -> dict[str, Any]:
        return {"faults": self.faults.spec.model_dump(), "counts": dict(self.faults.counts)}

    async def _get_faults(self, request: web.Request) -> web.StreamResponse:
        return json_response(self._faults_body())

    async def _set_faults(self, request: web.Request) -> web.StreamResponse:
        try:
            spec = FaultSpec.model_validate(orjson.loads(await request.read()))
            self.faults.update(spec)
        except orjson.JSONDecodeError as exc:
            return error_response("openai", 400, f"The request body is not valid JSON: {exc}")
        except ValidationError as exc:
            return error_response("openai", 400, format_validation_error(exc, "the fault spec"))
        except ConfigError as exc:
            return error_response("openai", 400, str(exc))
        return json_response(self._faults_body())

    async def _pause(self, request: web.Request) -> web.StreamResponse:
        self.engine.pause()
        return json_response({"paused": True})

    async def _resume(self, request: web.Request) -> web.StreamResponse:
        self.engine.resume()
        return json_response({"paused": False})


def _authorized(request: web.Request, key: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(token.encode(), key.encode()):
        return True
    x_key = request.headers.get("x-api-key")
    return x_key is not None and secrets.compare_digest(x_key.encode(), key.encode())
