"""What a server says it is (every record's ``origin``): the served model, the engine, its version and a hash of
its launch flags, read by :func:`tokenmill.monitor.origin.fetch_origin` from the real servers and the twin."""

from __future__ import annotations

import re

import aiohttp
import pytest

from tests.engines.pool import LiveServer
from tests.helpers.conformance import OPENAI
from tokenmill.monitor.origin import fetch_origin

HASH = re.compile(r"[0-9a-f]{16}")


@pytest.mark.parametrize("server", OPENAI, indirect=True)
async def test_the_origin_names_the_served_model_engine_version_and_flags(
    http: aiohttp.ClientSession, server: LiveServer
) -> None:
    origin = await fetch_origin(http, server.base_url)
    assert origin.served_model == server.model
    if server.engine == "vllm":  # vLLM reports no launch flags
        assert origin.engine == "vllm" and origin.flags_hash is None
        assert origin.engine_version is not None and origin.engine_version.startswith("0.32")
    else:
        assert origin.engine == ("tokenmill-sim" if server.name.startswith("twin") else "sglang")
        assert origin.engine_version == "0.5.23"
        assert origin.flags_hash is not None and HASH.fullmatch(origin.flags_hash)
    assert await fetch_origin(http, server.base_url) == origin  # the live state does not move the hash
