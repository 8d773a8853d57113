"""Fixtures for the vLLM engine tests: the served model's tokenizer and an HTTP client (the server itself is
the session pool's ``engine_server``, see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from tokenizers import Tokenizer

from tests.engines.pool import LiveServer


@pytest.fixture
def tiny_tokenizer(engine_server: LiveServer) -> Tokenizer:
    """The served model's tokenizer, loaded in the test process."""
    return Tokenizer.from_file(str(engine_server.model_dir / "tokenizer.json"))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session
