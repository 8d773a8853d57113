"""The backend seam: one request in, one :class:`Generation` out, every failure a tokenmill error.

HTTP and aiohttp errors are translated here, once, into the request errors of :mod:`tokenmill.errors`
(whose tree says what the dispatcher does with each):

- connection refused / reset, connect timeout, server disconnect  -> ``ServerFault`` (the server is at fault,
  not the prompt, so the prompt's attempt budget is not spent)
- 429 and 503 (overloaded, queue full)                            -> ``ServerFault``
- read timeout                                                    -> ``RequestTimeout`` (a ``TransientError``; the
  dispatcher tells a full server's queue wait from a server that does not answer)
- 408, 5xx (but 503), malformed or truncated body                 -> ``TransientError`` (spends an attempt)
- 401 / 403 / 404 / 405 (bad key, wrong path or model)            -> ``MisconfiguredError``: the server, not the
  prompt, is unusable; the dispatcher sets the server aside and stops if every server says so
- any other 4xx (prompt too long, bad parameter)                  -> ``PermanentError`` with the server's message
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from tokenmill.config import RetrySpec, SamplingSpec
from tokenmill.errors import (
    ConfigError,
    MisconfiguredError,
    PermanentError,
    RequestError,
    RequestTimeout,
    ServerFault,
    TransientError,
)
from tokenmill.records import Generation, Prompt


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What every backend needs to build a request body."""

    model: str
    sampling: SamplingSpec
    api_key: str | None = None
    save_token_ids: bool = False
    tokenizer: str | None = None
    max_response_bytes: int = field(default_factory=lambda: RetrySpec().max_response_bytes)


def error_message(body: bytes, limit: int = 500) -> str:
    """The server's own error message from an error body (OpenAI, SGLang or vLLM shape), else the raw text."""
    try:
        obj = orjson.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:limit].strip() or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if msg:
                return str(msg)[:limit]
        elif isinstance(err, str):
            return err[:limit]
        if "detail" in obj:
            return str(obj["detail"])[:limit]
    return body.decode("utf-8", "replace")[:limit]


def classify_status(status: int, body: bytes, server: str) -> RequestError:
    """Map a non-2xx HTTP status to the right error type (see the module docstring)."""
    msg = f"HTTP {status}: {error_message(body)}"
    if status in (429, 503):
        return ServerFault(msg, status=status, server=server)
    if status in (401, 403, 404, 405):
        return MisconfiguredError(msg, status=status, server=server)
    if status == 408 or status >= 500:
        return TransientError(msg, status=status, server=server)
    return PermanentError(msg, status=status, server=server)


class Backend(ABC):
    """One API kind. Subclasses build the body and parse the response; ``generate`` does the HTTP."""

    kind: ClassVar[str]  # the job's ``api`` (one of config's ApiKind; a test ties the two)
    path: ClassVar[str]
    server_template: ClassVar[bool] = False  # the server applies the chat template (else the job's tokenizer does)
    prompt_ids: ClassVar[bool] = True  # with save_token_ids, the server returns the prompt's ids too
    registry: ClassVar[dict[str, type[Backend]]] = {}

    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        headers = {"Content-Type": "application/json"}
        if options.api_key:
            headers["Authorization"] = f"Bearer {options.api_key}"
        # Built once: aiohttp takes a CIMultiDict as is, and a parsed URL per server skips parsing per request.
        self.headers: CIMultiDict[str] = CIMultiDict(headers)
        self._targets: dict[str, URL] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if getattr(cls, "kind", None):
            Backend.registry[cls.kind] = cls

    @abstractmethod
    def body(self, prompt: Prompt) -> dict[str, Any]:
        """The JSON request body for one prompt."""

    @abstractmethod
    def parse(self, obj: dict[str, Any], sent: dict[str, Any]) -> Generation:
        """Turn a decoded 2xx response to ``sent`` into a Generation; KeyError/TypeError/ValueError if malformed."""

    def thinking_sent(self, prompt: Prompt) -> bool | None:
        """The thinking mode ``body(prompt)`` sends (recorded on the completion); None when it sends none."""
        return prompt.thinking

    def sampling_fields(self) -> dict[str, Any]:
        """Sampling parameters with OpenAI names (no Nones); extra_body merged by the caller."""
        s = self.options.sampling
        out: dict[str, Any] = {"max_tokens": s.max_tokens, "temperature": s.temperature}
        for name in ("top_p", "top_k", "stop", "seed"):
            value = getattr(s, name)
            if value is not None:
                out[name] = value
        return out

    def target(self, server: str) -> URL:
        """The request URL for ``server`` (parsed once per server)."""
        url = self._targets.get(server)
        if url is None:
            url = self._targets[server] = URL(server + self.path)
        return url

    async def _read_limited(self, resp: aiohttp.ClientResponse, server: str) -> bytes:
        """The body, refusing more than ``max_response_bytes`` (so no server can exhaust the client's memory)."""
        limit = self.options.max_response_bytes
        length = resp.content_length
        if length is not None:
            if length > limit:
                raise TransientError(
                    f"response of {length} bytes exceeds the {limit}-byte limit (retry.max_response_mb)",
                    server=server,
                )
            return await resp.read()  # the common case: one read of a body of announced size
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(1 << 20):
            size += len(chunk)
            if size > limit:
                raise TransientError(f"response exceeds the {limit}-byte limit (retry.max_response_mb)", server=server)
            chunks.append(chunk)
        return b"".join(chunks)

    async def generate(
        self, session: aiohttp.ClientSession, server: str, prompt: Prompt, *, read_timeout_s: float | None = None
    ) -> Generation:
        """POST one prompt to ``server`` and return its generation, or raise a RequestError subclass.
        ``read_timeout_s`` replaces the session's read timeout for this request (None: the session's)."""
        sent = self.body(prompt)
        payload = orjson.dumps(sent)
        timeout = _timeout(session.timeout, read_timeout_s)
        try:
            async with session.post(self.target(server), data=payload, headers=self.headers, timeout=timeout) as resp:
                status = resp.status
                raw = await self._read_limited(resp, server)
        except aiohttp.SocketTimeoutError as exc:
            raise RequestTimeout(f"no response within the read timeout ({exc})", server=server) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise ServerFault(f"connection failed: {type(exc).__name__}: {exc}", server=server) from exc
        except TimeoutError as exc:
            raise RequestTimeout("request timed out", server=server) from exc
        if status >= 300:
            raise classify_status(status, raw, server)
        try:
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise TypeError("response is not a JSON object")
            gen = self.parse(obj, sent)
            gen.thinking = self.thinking_sent(prompt)
            if not isinstance(gen.text, str):
                raise TypeError(f"the generated text is {type(gen.text).__name__}, not a string")
            return gen
        # AttributeError: a field of the wrong JSON type (e.g. "message": null) met a .get()
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            snippet = raw[:120].decode("utf-8", "replace")
            raise TransientError(f"malformed response body ({exc}): {snippet!r}", server=server) from exc


def _timeout(base: aiohttp.ClientTimeout, read_s: float | None) -> aiohttp.ClientTimeout:
    """The session's timeouts with another read timeout (the whole request's bound moved with it)."""
    if read_s is None or read_s == base.sock_read:
        return base
    total = None if base.total is None else base.total - (base.sock_read or 0.0) + read_s
    return aiohttp.ClientTimeout(total=total, connect=base.connect, sock_connect=base.sock_connect, sock_read=read_s)


PROBE_PROMPT = Prompt(id="tokenmill-probe", text="Say hello.")


async def probe_token_ids(
    kind: str, options: BackendOptions, session: aiohttp.ClientSession, servers: list[str]
) -> None:
    """With ``save_token_ids``: ask the first server that answers for a one-token completion and raise
    ConfigError if its answer has no token ids (a server that ignores the request field), so a run never
    records null ids. Servers that do not answer are left to the run; nothing is raised for them."""
    if not options.save_token_ids:
        return
    one_token = dataclasses.replace(options, sampling=options.sampling.model_copy(update={"max_tokens": 1}))
    backend = make_backend(kind, one_token)
    for server in servers:
        try:
            await backend.generate(session, server, PROBE_PROMPT)
        except MisconfiguredError as exc:
            raise ConfigError(f"{server}: {exc.message}") from exc
        except RequestError:
            continue  # down or busy: try the next; the run's own requests check every answer
        return


def make_backend(kind: str, options: BackendOptions) -> Backend:
    """The backend registered for an API kind (the package imports every backend module, which registers its
    class); an unknown kind lists the known ones."""
    cls = Backend.registry.get(kind)
    if cls is None:
        known = ", ".join(sorted(Backend.registry))
        raise ConfigError(f"unknown api {kind!r}; known: {known}")
    return cls(options)


def usage_int(usage: dict[str, Any] | None, key: str) -> int | None:
    """An integer usage field, or None when absent."""
    if not usage:
        return None
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) else None
