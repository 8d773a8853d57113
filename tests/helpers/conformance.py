"""Small HTTP helpers for the conformance tests: the server kinds, JSON calls, /metrics as typed families, polling,
load."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.engines.pool import LiveServer
from tests.helpers.waiting import wait_for_async

POLL_DEADLINE_S = 60.0
POLL_PAUSE_S = 0.02
# the server kinds of the conformance suite: every SGLang kind, real and twin; the OpenAI routes also on vLLM
SGLANG = ("sglang-dense", "sglang-hybrid", "twin-dense", "twin-hybrid")
OPENAI = (*SGLANG, "vllm")


async def post(http: aiohttp.ClientSession, server: LiveServer, path: str, **body: Any) -> tuple[int, Any]:
    """POST a JSON body (OpenAI routes get the served model name); returns the status and the decoded JSON (an
    object, or a list for a batch)."""
    if path.startswith("/v1/"):
        body.setdefault("model", server.model)
    async with http.post(server.base_url + path, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def burst(server: LiveServer, path: str, bodies: Sequence[Mapping[str, Any]]) -> list[tuple[int, Any]]:
    """POST each JSON body to ``path`` as a request of its own, all at once: every connection is opened first, then
    the requests are written back to back with nothing awaited between them, so they reach the server together
    however busy this machine is (aiohttp tasks would each write in turn, and a busy machine spreads those turns
    over tens of milliseconds). Returns each answer's status and decoded JSON, in order."""
    url = urlsplit(server.base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    conns = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in bodies))
    for (_, writer), body in zip(conns, bodies, strict=True):
        data = orjson.dumps(body)
        head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        writer.write(f"{head}Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    answers = []
    for reader, writer in conns:
        raw = await reader.read()
        writer.close()
        answers.append(_http_response(raw))
    return answers


def _http_response(raw: bytes) -> tuple[int, Any]:
    """The status and JSON body of one HTTP/1.1 response read to the end (``Connection: close``)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks, rest = [], body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            chunks.append(rest[:size])
            rest = rest[size + 2 :]
        body = b"".join(chunks)
    return status, orjson.loads(body)


async def get_json(http: aiohttp.ClientSession, server: LiveServer, path: str) -> Any:
    async with http.get(server.base_url + path) as resp:
        assert resp.status == 200, f"GET {path}: HTTP {resp.status}"
        return await resp.json(content_type=None)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    samples: tuple[Sample, ...]

    def value(self, **labels: str) -> float:
        """The sum of the samples whose labels include ``labels``."""
        return sum(s.value for s in self.samples if all(s.labels.get(k) == v for k, v in labels.items()))


async def metrics_text(http: aiohttp.ClientSession, server: LiveServer) -> str:
    async with http.get(server.base_url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def families(http: aiohttp.ClientSession, server: LiveServer) -> dict[str, Family]:
    """/metrics parsed with prometheus_client: family name (without ``_total``) -> type and samples."""
    out: dict[str, Family] = {}
    for fam in text_string_to_metric_families(await metrics_text(http, server)):
        samples = tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in fam.samples)
        out[fam.name] = Family(fam.name, fam.type, samples)
    return out


async def until(
    probe: Callable[[], Awaitable[Any]], done: Callable[[Any], bool], what: str, deadline_s: float = POLL_DEADLINE_S
) -> Any:
    """Call ``probe`` until ``done(result)``; fails with the last result after the deadline."""
    return await wait_for_async(what, probe, deadline_s, POLL_PAUSE_S, done=done)


def gauge(fams: Mapping[str, Family], name: str) -> float:
    return fams[name].value()


async def generate(
    http: aiohttp.ClientSession, server: LiveServer, text: str, max_new_tokens: int, **params: Any
) -> dict[str, Any]:
    status, body = await post(
        http, server, "/generate", text=text, sampling_params={"max_new_tokens": max_new_tokens, **params}
    )
    assert status == 200 and isinstance(body, dict), body
    return body


def start_load(
    http: aiohttp.ClientSession, server: LiveServer, n: int, max_new_tokens: int, tag: str = "load"
) -> list[asyncio.Task[dict[str, Any]]]:
    """``n`` concurrent /generate requests of exactly ``max_new_tokens`` tokens each, as tasks."""
    return [
        asyncio.create_task(
            generate(http, server, f"{tag} {i}: tell me about the world.", max_new_tokens, ignore_eos=True)
        )
        for i in range(n)
    ]


def stop_string(text: str) -> str:
    """Two characters from the middle of a greedy answer, to send back as a stop string."""
    assert len(text) >= 4, f"the answer is too short to pick a stop string from: {text!r}"
    middle = len(text) // 2
    return text[middle : middle + 2]
