"""The session pool's servers for tests: a server of a kind, or the test failed with its log."""

from __future__ import annotations

import pytest

from tests.engines.pool import LiveServer, ServerPool
from tests.engines.process import StartFailed


def live_server(pool: ServerPool, name: str) -> LiveServer:
    """The pool's server of kind ``name``; a server that does not start fails the test with its log."""
    try:
        return pool.get(name)
    except StartFailed as exc:
        pytest.fail(str(exc), pytrace=False)
