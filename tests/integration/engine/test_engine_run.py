"""``tokenmill run`` against the real vLLM server: every prompt once, token counts the engine agrees with."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from tokenizers import Tokenizer

from tests.engines.pool import LiveServer as EngineServer
from tests.engines.vllm import decodes_to
from tests.helpers.waiting import wait_for_async
from tokenmill.monitor.scrape import ServerSnapshot, scrape

pytestmark = pytest.mark.engine

N_PROMPTS = 60
MAX_TOKENS = 16
POLL_DEADLINE_S = 30.0


def write_inputs(tmp: Path, server: EngineServer, api: str) -> tuple[Path, Path]:
    """A prompt file (with one prompt longer than the context) and a job file; returns (job, output dir)."""
    prompts = tmp / "prompts.jsonl"
    rows = [{"id": f"q{i:03d}", "prompt": f"Say something about day {i}."} for i in range(N_PROMPTS)]
    rows.append({"id": "too-long", "prompt": "the world and the people " * 200})
    prompts.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    out = tmp / "out"
    job: dict[str, Any] = {
        "input": {"path": str(prompts), "id_field": "id"},
        "servers": [server.base_url],
        "api": api,
        "model": server.model,
        "sampling": {"max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}},
        "save_token_ids": True,
        "concurrency": 16,
        "output": {"dir": str(out), "shard_size": 25},
        "retry": {"backoff_base_s": 0.01, "backoff_max_s": 0.2},
    }
    job_path = tmp / "job.yaml"
    job_path.write_text(yaml.safe_dump(job))
    return job_path, out


def tokenmill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenmill", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def read_jsonl(paths: list[Path]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in paths for line in path.read_bytes().splitlines() if line]


async def settled(http: aiohttp.ClientSession, server: EngineServer, requests: float) -> ServerSnapshot:
    """Scrape until the server has finished ``requests`` requests in total; fails after the deadline."""
    return await wait_for_async(
        f"the server to settle after {requests:g} requests",
        lambda: scrape(http, server.base_url, time.monotonic),
        POLL_DEADLINE_S,
        done=lambda snap: (snap.requests_total or 0) >= requests and snap.running == 0,
    )


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
async def test_run_completes_every_prompt_once(
    api: str,
    tmp_path: Path,
    http: aiohttp.ClientSession,
    engine_server: EngineServer,
    tiny_tokenizer: Tokenizer,
) -> None:
    job, out = write_inputs(tmp_path, engine_server, api)
    before = await settled(http, engine_server, 0)
    assert before.requests_total is not None and before.generation_tokens_total is not None

    res = await asyncio.to_thread(tokenmill, "run", str(job), "--no-live")
    assert res.returncode == 0, res.stdout + res.stderr

    done = read_jsonl(sorted(out.glob("completions_*.jsonl")))
    assert sorted(r["id"] for r in done) == [f"q{i:03d}" for i in range(N_PROMPTS)]
    assert len(list(out.glob("completions_*.jsonl"))) == 3  # 25 + 25 + a sealed tail of 10
    for rec in done:
        assert (rec["finish_reason"], rec["completion_tokens"]) == ("length", MAX_TOKENS)
        assert (rec["model"], rec["server"]) == ("tiny", engine_server.base_url)
        assert rec["origin"]["served_model"] == "tiny" and rec["origin"]["engine"] == "vllm"
        assert rec["origin"]["engine_version"].startswith("0.32") and rec["origin"]["flags_hash"] is None
        assert rec["prompt_tokens"] == len(rec["prompt_token_ids"]) > 0
        assert len(rec["completion_token_ids"]) == MAX_TOKENS
        assert decodes_to(tiny_tokenizer.decode(rec["completion_token_ids"]), rec["completion"])

    (failed,) = read_jsonl([out / "failed.jsonl"])
    assert (failed["id"], failed["http_status"], failed["attempts"]) == ("too-long", 400, 1)
    assert "maximum context length is 512 tokens" in failed["error"]

    # the engine counted exactly the tokens the corpus records, the one-token probe that checked at start that it
    # returns token ids (save_token_ids), and the thinking probe (max_tokens with ignore_eos) every job sends
    after = await settled(http, engine_server, before.requests_total + N_PROMPTS + 2)
    assert after.requests_total == before.requests_total + N_PROMPTS + 2
    assert after.generation_tokens_total == before.generation_tokens_total + (N_PROMPTS + 1) * MAX_TOKENS + 1

    verify = await asyncio.to_thread(tokenmill, "verify", str(out), "--input", str(job))
    assert verify.returncode == 0, verify.stdout + verify.stderr
