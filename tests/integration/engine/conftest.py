"""Fixtures for the engine tests: one real vLLM CPU server for the whole run, its tokenizer, an HTTP client.

The engine lives in its own environment (``make engine`` builds ``.engine-venv``) and serves a tiny
random-weight model built locally by ``scripts/build_tiny_model.py``. Without ``.engine-venv`` the engine
tests are skipped, unless ``TOKENMILL_REQUIRE_ENGINE`` is set (``make test`` sets it): then a missing
engine fails them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from tokenizers import Tokenizer
from vllm_server import EngineServer, start_engine_server


@pytest.fixture(scope="session")
def engine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """vLLM on a free loopback port, started once for the whole run and stopped (with its children) after."""
    yield from start_engine_server(tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="session")
def tiny_tokenizer(engine_server: EngineServer) -> Tokenizer:
    """The served model's tokenizer, loaded in the test process."""
    return Tokenizer.from_file(str(engine_server.model_dir / "tokenizer.json"))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session
