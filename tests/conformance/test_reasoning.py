"""A reasoning parser on the chat route: SGLang 0.5.23 started with ``--reasoning-parser qwen3`` on the tiny dense
model (the suite's dense server with non-default flags, tests/engines/pool.py), and its twin with the same flags.

The tiny model has random weights and its tokenizer no thinking tokens, so it never writes ``<think>`` itself; but
its chat template has no thinking switch either, and for such a template 0.5.23's ``qwen3`` parser reads the whole
answer as reasoning unless the request sends ``enable_thinking: false``. That is enough to pin the path tokenmill
relies on: where the reasoning comes back as the request's thinking mode decides, the start probe's judgement, and
the records of a run with thinking on and off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.engines.pool import SGLANG_DENSE_FLAGGED, LiveServer, twin_of
from tests.helpers.conformance import post
from tokenmill.config import JobSpec
from tokenmill.output.records_reader import iter_records
from tokenmill.run.runner import run_job

REASONING = SGLANG_DENSE_FLAGGED  # --reasoning-parser qwen3 (and flags that do not touch these tests)
TWIN = twin_of(REASONING)
KINDS = (REASONING.name, TWIN.name)
CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Tell me about the world."}]


@pytest.mark.parametrize("server", KINDS, indirect=True)
async def test_enable_thinking_decides_whether_the_answer_is_read_as_reasoning(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    # sampled, not greedy: the tiny model's greedy answer is blank lines, which would say nothing of where text goes
    common: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 8, "temperature": 1.0, "ignore_eos": True}
    status, on = await post(http, server, CHAT, **common, chat_template_kwargs={"enable_thinking": True})
    assert status == 200, on
    message = on["choices"][0]["message"]
    assert isinstance(message["reasoning_content"], str) and message["reasoning_content"].strip()
    assert message["content"] == ""
    status, off = await post(http, server, CHAT, **common, chat_template_kwargs={"enable_thinking": False})
    assert status == 200, off
    message = off["choices"][0]["message"]
    assert message["reasoning_content"] is None and message["content"].strip()


def _job(server: LiveServer, tmp: Path, thinking: str) -> JobSpec:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"Tell me about day {i}."}) + "\n" for i in range(6))
    )
    return JobSpec.model_validate(
        {
            "input": {"path": str(prompts)},
            "servers": [server.base_url],
            "model": server.model,
            "sampling": {"max_tokens": 8, "temperature": 1.0, "extra_body": {"ignore_eos": True}},
            "output": {"dir": str(tmp / f"out-{thinking}")},
            "concurrency": 4,
            "thinking": thinking,
        }
    )


@pytest.mark.parametrize("server", KINDS, indirect=True)
async def test_a_run_with_thinking_on_passes_the_probe_and_records_the_reasoning_apart(
    server: LiveServer, tmp_path: Path
) -> None:
    job = _job(server, tmp_path, "on")
    result = await run_job(job, live=False)
    assert result.finished
    recs = list(iter_records(Path(job.output.dir)))
    assert len(recs) == 6
    for r in recs:
        assert r["thinking"] is True and r["reasoning_content"] and r["completion"] == ""
        assert r["quality"]["flags"] == ["truncated", "no_answer"]  # reasoning cut at max_tokens: kept, flagged


@pytest.mark.parametrize("server", KINDS, indirect=True)
async def test_a_run_with_thinking_off_records_the_answer_and_no_reasoning(server: LiveServer, tmp_path: Path) -> None:
    job = _job(server, tmp_path, "off")
    result = await run_job(job, live=False)
    assert result.finished
    for r in iter_records(Path(job.output.dir)):
        assert r["thinking"] is False and r["reasoning_content"] is None and r["completion"].strip()
