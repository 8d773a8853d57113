"""A fault-injecting reverse proxy in front of each server: the network's share of the chaos.

The simulated server injects what a server does wrong (5xx, 429, stalls, dropped connections, a JSON body
cut in half; ``POST /sim/faults``). What happens between the client and the server is injected here, on
generation requests (POST) only, at rates the harness changes while the run goes on:

=============  ========================================================================================
``reset``      the connection is reset (TCP RST), before or after the server did the work
``truncate``   a 200 whose body stops short of its Content-Length, then the connection closes
``garbage``    a 200 with a body that is not the API's: an HTML error page, or JSON of the wrong shape
``gateway``    502 / 503 / 504 with an HTML body, as a load balancer answers when its backend is away
``trickle``    a 200 whose body comes a byte at a time, far slower than any timeout: the client must give
               up on it within its request timeout (:attr:`FaultProxy.trickle_held_s` says how long it
               stayed)
=============  ========================================================================================

A server that is down (killed, restarting) shows through as a reset connection. Every listener binds
127.0.0.1; the proxy runs its own event loop in a thread and counts what it injected and forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
import threading
from typing import Literal, get_args

import aiohttp
from aiohttp import web

NetFault = Literal["reset", "truncate", "garbage", "gateway", "trickle"]
NET_FAULTS: tuple[NetFault, ...] = get_args(NetFault)
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
TRICKLE_BYTE_S = 0.25  # one byte of a trickled body every this many seconds

_GARBAGE: tuple[tuple[bytes, str], ...] = (
    (b"<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>", "text/html"),
    (b'{"object": "chat.completion", "choices": []}', "application/json"),
    (b'{"id": "x", "choices": [{"index": 0, "message": null}]}', "application/json"),
    (b"\x00\xff\xfe not json at all", "application/octet-stream"),
    (b"", "application/json"),
)
_PASS_HEADERS = ("Content-Type", "Retry-After")


class FaultProxy:
    """One listening port per upstream server; faults drawn per generation request from a seeded generator."""

    def __init__(self, upstreams: list[str], seed: int) -> None:
        self.upstreams = list(upstreams)
        self.counts: dict[str, int] = dict.fromkeys(NET_FAULTS, 0)
        self.forwarded = 0  # generation requests passed to a server
        self.requests = 0  # every request received
        self.trickle_held_s: list[float] = []  # how long each trickled answer kept its client
        self._rates: dict[NetFault, float] = {}
        self._rng = random.Random(seed)
        self._by_port: dict[int, str] = {}
        self.urls: dict[str, str] = {}  # upstream URL -> proxy URL
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._session: aiohttp.ClientSession | None = None

    # ---- control (any thread) -----------------------------------------------------------------------------

    def start(self) -> dict[str, str]:
        """Bind every port and serve from a thread; returns upstream URL -> proxy URL."""
        self._thread = threading.Thread(target=self._main, name="chaos-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S) or self._error is not None:
            raise RuntimeError(f"the fault proxy did not start: {self._error!r}")
        return dict(self.urls)

    def set_rates(self, rates: dict[NetFault, float]) -> None:
        """Inject each fault on this fraction of generation requests from now on (an empty dict: none)."""
        if sum(rates.values()) > 1.0:
            raise ValueError(f"fault rates add up past 1: {rates}")
        self._rates = dict(rates)

    def stop(self) -> None:
        """Close every listener and the upstream connections; returns once the thread ended."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and loop.is_running():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)

    # ---- the proxy's thread -------------------------------------------------------------------------------

    def _main(self) -> None:
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        logging.getLogger("aiohttp.web").setLevel(logging.CRITICAL)
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
            self._session = session
            app = web.Application(client_max_size=64 << 20)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            try:
                for upstream in self.upstreams:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((HOST, 0))
                    port = int(sock.getsockname()[1])
                    await web.SockSite(runner, sock, backlog=1024).start()
                    self._by_port[port] = upstream
                    self.urls[upstream] = f"http://{HOST}:{port}"
                self._ready.set()
                await self._stop.wait()
            finally:
                await runner.cleanup()

    def _draw(self) -> NetFault | None:
        u, edge = self._rng.random(), 0.0
        for kind, rate in self._rates.items():
            edge += rate
            if u < edge:
                return kind
        return None

    def _injected(self, kind: NetFault) -> None:
        self.counts[kind] += 1

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        upstream = self._by_port[int(sockname[1])] if sockname else self.upstreams[0]
        body = await request.read()
        fault = self._draw() if request.method == "POST" else None
        if fault == "gateway":
            self._injected(fault)
            status = self._rng.choice((502, 503, 504))
            page = f"<html><body><h1>{status} Bad Gateway</h1><p>upstream unavailable</p></body></html>"
            return web.Response(status=status, text=page, content_type="text/html")
        if fault == "reset" and self._rng.random() < 0.5:
            self._injected(fault)
            return _reset(request)
        headers = {k: v for k, v in request.headers.items() if k in ("Content-Type", "Authorization")}
        assert self._session is not None
        try:
            async with self._session.request(
                request.method, upstream + request.path_qs, data=body or None, headers=headers
            ) as up:
                data = await up.read()
                status = up.status
                passed = {k: up.headers[k] for k in _PASS_HEADERS if k in up.headers}
        except (aiohttp.ClientError, OSError, TimeoutError):
            return _reset(request)  # the server is away: the client sees its connection go
        if request.method == "POST":
            self.forwarded += 1
        if fault == "reset":
            self._injected(fault)
            return _reset(request)  # the server did the work; the answer never arrives
        if fault is None or status != 200:  # faults on answers apply to good answers only
            return web.Response(status=status, body=data, headers=passed)
        self._injected(fault)
        if fault == "truncate":
            return await _truncated(request, data, passed)
        if fault == "trickle":
            return await self._trickle(request, data, passed)
        if fault == "garbage":
            junk, ctype = self._rng.choice(_GARBAGE)
            return web.Response(status=200, body=junk, headers={"Content-Type": ctype})
        return web.Response(status=status, body=data, headers=passed)

    async def _trickle(self, request: web.Request, data: bytes, headers: dict[str, str]) -> web.StreamResponse:
        """Send the answer a byte at a time until the client hangs up; note how long that took."""
        began = asyncio.get_running_loop().time()
        resp = web.StreamResponse(status=200, headers=headers)
        resp.content_length = len(data)
        try:
            await resp.prepare(request)
            for i in range(len(data)):
                await resp.write(data[i : i + 1])
                await asyncio.sleep(TRICKLE_BYTE_S)
        except (ConnectionError, RuntimeError):
            pass  # the client hung up (a cancelled handler, the other way it shows, is re-raised)
        finally:
            self.trickle_held_s.append(asyncio.get_running_loop().time() - began)
        return resp


def _reset(request: web.Request) -> web.StreamResponse:
    """Abort the client's connection with a TCP RST (linger 0), then return a response nobody will read."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=500)


async def _truncated(request: web.Request, data: bytes, headers: dict[str, str]) -> web.StreamResponse:
    """Announce the whole body, send part of it, then close the connection."""
    resp = web.StreamResponse(status=200, headers=headers)
    resp.content_length = len(data)
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError, RuntimeError):
        await resp.write(data[: max(1, len(data) // 3)])
    if request.transport is not None:
        request.transport.close()
    return resp
