"""A canned OpenAI-compatible server for client benchmarks: every POST is answered at once with one of a few
pre-built ~2,000-token chat completions.

``tokenmill sim --instant`` draws and renders every completion (~0.6 ms of its CPU for 2,000 tokens), so one
core of it serves fewer than 2,000 requests/s: it cannot show a client's limit. This server does no work per
request beyond reading it and writing prepared bytes (a few microseconds), so the client is what is measured.
Plain asyncio protocol, HTTP/1.1 keep-alive; ``GET /v1/models`` lists the one model, as a real server does (a
client that asks what a server serves, as tokenmill does for every record's ``origin``, asks once, not again and
again); any other GET (``/health``, ``/metrics``) answers 200 ``ok``.

    python -m bench.canned --tokens 2000      # prints "canned listening on http://127.0.0.1:PORT"

With ``--mean M``, the answers' lengths are log-normal with mean M tokens (``--sigma``, ``--variants`` answers
drawn, those past ``--max-tokens`` cut there with ``finish_reason: length``), and each answer starts with the
server's seed and a request counter, so no two answers are the same (the corpus has no duplicates).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import signal

VARIANTS = 16


MARK = "0000000000"  # replaced by each request's counter (--mean)


def _completion(i: int, tokens: int, rng: random.Random, mark: str = "", finish: str = "stop") -> bytes:
    words = [rng.choice(("lorem", "ipsum", "dolor", "amet", "sit", "elit", "sed", "tempor")) for _ in range(tokens)]
    if mark:
        words[0] = mark
    body = {
        "id": f"chatcmpl-canned-{i}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "tokenmill-sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": " ".join(words)},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": tokens + 20},
    }
    return json.dumps(body).encode()


def _response(body: bytes, status: str = "200 OK", ctype: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _content_length(head: bytes) -> int:
    i = head.find(b"content-length:")
    if i < 0:
        return 0
    end = head.find(b"\r\n", i)
    return int(head[i + 15 : end if end >= 0 else len(head)])


class _Conn(asyncio.Protocol):
    def __init__(
        self, answers: list[bytes], small: bytes, counter: list[int] | None = None, tag: str = "", models: bytes = b""
    ) -> None:
        self.answers = answers
        self.small = small
        self.models = models or small
        self.counter = counter  # shared by the server's connections: every answer made unique
        self.tag = tag.encode()
        self.buf = b""
        self.need = -1  # body bytes still to read for the current request (-1: reading a head)
        self.is_post = False
        self.is_models = False
        self.n = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buf[:end].lower()
                self.buf = self.buf[end + 4 :]
                self.is_post = head.startswith(b"post")
                self.is_models = head.startswith(b"get /v1/models")
                self.need = _content_length(head)
            if len(self.buf) < self.need:
                return
            self.buf = self.buf[self.need :]
            self.need = -1
            assert self.transport is not None
            if self.is_post:
                self.n += 1
                if self.counter is None:
                    self.transport.write(self.answers[self.n % len(self.answers)])
                else:
                    self.counter[0] += 1
                    k = self.counter[0]
                    answer = self.answers[(k * 7919) % len(self.answers)]
                    at = answer.find(MARK.encode())
                    unique = (self.tag + b"x%d" % k).rjust(len(MARK), b"0")[-len(MARK) :]
                    self.transport.write(answer[:at] + unique + answer[at + len(MARK) :])
            else:
                self.transport.write(self.models if self.is_models else self.small)


def _lognormal(mean: float, sigma: float, variants: int, max_tokens: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    mu = math.log(mean) - sigma * sigma / 2
    out = []
    for i in range(variants):
        n = max(2, round(rng.lognormvariate(mu, sigma)))
        finish = "length" if n >= max_tokens else "stop"
        out.append(_response(_completion(i, min(n, max_tokens), rng, MARK, finish)))
    return out


async def serve(tokens: int, port: int, args: argparse.Namespace | None = None) -> None:
    rng = random.Random(0)
    counter: list[int] | None = None
    if args is not None and args.mean:
        answers = _lognormal(args.mean, args.sigma, args.variants, args.max_tokens, args.seed)
        counter = [0]
    else:
        answers = [_response(_completion(i, tokens, rng)) for i in range(VARIANTS)]
    tag = str(args.seed) if args is not None else ""
    small = _response(b"ok\n", ctype="text/plain")
    model = {"id": "tokenmill-sim", "object": "model", "created": 1_700_000_000, "owned_by": "bench.canned"}
    models = _response(json.dumps({"object": "list", "data": [model]}).encode())
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Conn(answers, small, counter, tag, models), "127.0.0.1", port, backlog=4096
    )
    port = server.sockets[0].getsockname()[1]
    print(f"canned listening on http://127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mean", type=float, default=0.0, help="log-normal answer lengths with this mean (tokens)")
    ap.add_argument("--sigma", type=float, default=0.6)
    ap.add_argument("--variants", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=16_384)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    asyncio.run(serve(args.tokens, args.port, args))


if __name__ == "__main__":
    main()
