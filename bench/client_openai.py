"""The client most users write: ``openai.AsyncOpenAI`` + ``asyncio.Semaphore``, results appended to a JSONL file.

Run by the overhead benchmark in its own process (pinned to the client core); prints one JSON line.

    python -m bench.client_openai --servers http://127.0.0.1:1234 --n 3000 --inflight 256 --work /tmp/x
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI  # imported before the clock starts, as tokenmill's modules are

from bench.common import Stopwatch, client_args, print_client_result, write_prompts


async def generate(servers: list[str], prompts: list[dict[str, Any]], inflight: int, out: Path, max_tokens: int) -> int:
    clients = [AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3) for url in servers]
    sem = asyncio.Semaphore(inflight)
    done = 0
    with out.open("w") as fh:

        async def one(i: int, row: dict[str, Any]) -> None:
            nonlocal done
            async with sem:
                resp = await clients[i % len(clients)].chat.completions.create(
                    model="tokenmill-sim",
                    messages=[{"role": "user", "content": row["prompt"]}],
                    max_tokens=max_tokens,
                    temperature=0.7,
                )
            fh.write(json.dumps({"id": row["id"], "completion": resp.choices[0].message.content}) + "\n")
            done += 1

        await asyncio.gather(*(one(i, row) for i, row in enumerate(prompts)))
    for c in clients:
        await c.close()
    return done


def main() -> None:
    ap = client_args()
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path = write_prompts(args.work / "prompts.jsonl", args.n)
    watch = Stopwatch()
    prompts = [json.loads(line) for line in path.read_text().splitlines()]
    done = asyncio.run(generate(args.servers, prompts, args.inflight, args.work / "out.jsonl", args.max_tokens))
    wall, cpu = watch.read()
    print_client_result("openai", done, done == args.n, wall, cpu)


if __name__ == "__main__":
    main()
