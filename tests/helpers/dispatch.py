"""The dispatcher's test doubles: a scripted backend, a sink that keeps what it is given, prompts, a fast retry."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from tokenmill.backends.base import Backend, BackendOptions
from tokenmill.config import RetrySpec, SamplingSpec
from tokenmill.records import Completion, Failure, Generation, Prompt

Script = Callable[[str, Prompt, "ScriptedBackend"], Any]


class ScriptedBackend(Backend):
    """Answers through ``script(server, prompt)``; tracks concurrency per server."""

    path = "/fake"

    def __init__(self, script: Script) -> None:
        super().__init__(BackendOptions(model="m", sampling=SamplingSpec()))
        self.script = script
        self.inflight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.calls: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None
        self.timeouts: list[float | None] = []  # each request's read timeout (None: the session's)

    def body(self, prompt: Prompt) -> dict[str, Any]:
        return {}

    def parse(self, obj: dict[str, Any], sent: dict[str, Any]) -> Generation:
        raise NotImplementedError

    async def generate(
        self, session: aiohttp.ClientSession, server: str, prompt: Prompt, *, read_timeout_s: float | None = None
    ) -> Generation:
        self.calls.append((server, prompt.id))
        self.timeouts.append(read_timeout_s)
        self.inflight[server] += 1
        self.peak[server] = max(self.peak[server], self.inflight[server])
        try:
            await asyncio.sleep(0)  # yield so other requests overlap
            if self.gate is not None:
                await self.gate.wait()
            result = self.script(server, prompt, self)
            if isinstance(result, BaseException):
                raise result
            return Generation(text=f"answer {prompt.id}", finish_reason="stop", prompt_tokens=3, completion_tokens=5)
        finally:
            self.inflight[server] -= 1


class Sink:
    def __init__(self) -> None:
        self.done: list[Completion] = []
        self.failed: list[Failure] = []

    def write(self, rec: Completion) -> None:
        self.done.append(rec)

    def fail(self, rec: Failure) -> None:
        self.failed.append(rec)


async def prompts(n: int) -> AsyncIterator[Prompt]:
    for i in range(n):
        yield Prompt(id=str(i), text=f"prompt {i}")


def retry(**kw: Any) -> RetrySpec:
    base = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "probe_interval_s": 0.01, "quarantine_after": 3}
    return RetrySpec(**{**base, **kw})
