"""The floor of a Python client: a bare aiohttp + orjson loop (the client side of the overhead benchmark).

The same requests as tokenmill sends (the same chat body, the same prompts, the same servers, the same number in
flight) under the same conditions as ``tokenmill run``: uvloop's event loop when installed (``BENCH_LOOP=asyncio``
for asyncio's own) and the run's garbage-collector settings (:func:`tokenmill.run.collector.collect_less`;
``--default-gc`` leaves Python's). Nothing else: each response is read, decoded with orjson and its text taken;
nothing is written, retried or counted beyond the total. What tokenmill costs above this is its own work per
completion (records, quality signals, shards, retries, metrics). Prints one JSON line.

    python -m bench.client_bare --servers http://127.0.0.1:1234 --n 20000 --inflight 256 --work /tmp/x
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from bench.common import Stopwatch, client_args, print_client_result, write_prompts
from tokenmill.run.collector import collect_less


async def generate(servers: list[str], prompts: list[dict[str, Any]], inflight: int, max_tokens: int) -> int:
    """Complete every prompt with ``inflight`` requests in flight in total; the number completed."""
    # parsed once, as tokenmill does: the floor is the loop, not per-request URL parsing
    urls = [URL(f"{url}/v1/chat/completions") for url in servers]
    headers = CIMultiDict({"Content-Type": "application/json"})
    done = 0
    queue = iter(enumerate(prompts))
    connector = aiohttp.TCPConnector(limit=inflight, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal done
            for i, row in queue:
                body = {
                    "model": "tokenmill-sim",
                    "max_tokens": max_tokens,
                    "temperature": 0.7,
                    "messages": [{"role": "user", "content": row["prompt"]}],
                }
                async with session.post(urls[i % len(urls)], data=orjson.dumps(body), headers=headers) as resp:
                    raw = await resp.read()
                text = orjson.loads(raw)["choices"][0]["message"]["content"]
                if resp.status == 200 and isinstance(text, str):
                    done += 1

        await asyncio.gather(*(worker() for _ in range(inflight)))
    return done


def _run(main: Coroutine[Any, Any, int]) -> int:
    """On uvloop's loop when installed, as ``tokenmill run`` does (``BENCH_LOOP=asyncio``: asyncio's own)."""
    if os.environ.get("BENCH_LOOP") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)


def main() -> None:
    ap = client_args()
    ap.add_argument("--default-gc", action="store_true", help="Python's collector settings, not tokenmill run's")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path = write_prompts(args.work / "prompts.jsonl", args.n)
    watch = Stopwatch()
    prompts = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    with contextlib.nullcontext() if args.default_gc else collect_less(args.inflight):
        done = _run(generate(args.servers, prompts, args.inflight, args.max_tokens))
    wall, cpu = watch.read()
    print_client_result("bare" + (" (default GC)" if args.default_gc else ""), done, done == args.n, wall, cpu)


if __name__ == "__main__":
    main()
