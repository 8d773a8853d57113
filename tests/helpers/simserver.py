"""Helpers shared by the simulated-server integration tests: polling a condition and reading /metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.waiting import wait_for_async

# Labels every sample carries (left out of the keys so tests can name series briefly).
CONST_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "pid", "is_streaming"}


async def until(
    cond: Callable[[], Awaitable[bool]], timeout: float = 20.0, every: float = 0.01, what: str = "the condition"
) -> None:
    """Poll ``cond`` until it holds, or fail after ``timeout`` seconds."""
    await wait_for_async(what, cond, timeout, every)


async def metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """``name{label=value,...}`` (the non-constant labels) -> value, parsed with prometheus_client's parser."""
    async with session.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in CONST_LABELS)
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
