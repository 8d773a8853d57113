"""Session-wide test plumbing: the pool of real and simulated servers, test order by server kind, and S3.

Tests that need a real engine name it through a fixture (``engine_server`` for vLLM, ``sglang_dense``,
``sglang_hybrid``), a fixture parametrized by kind name (the conformance suite's ``server``) or
``@pytest.mark.server_kind(NAME)``.
They run after all other tests, grouped by kind, so that each engine starts once while at most
``TOKENMILL_TEST_ENGINES`` (default 1) are up.

Tests that need an S3 API take ``s3`` (a new bucket on a moto server shared by the module) or ``own_s3`` (a server
of the test's own, which the test may stop and restart); tests/s3server.py has the server itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.engines.pool import KINDS, LiveServer, ServerPool
from tests.helpers.servers import live_server

if TYPE_CHECKING:
    from tests.helpers.s3server import S3

REAL_ENGINE_TIMEOUT_S = 900  # a real engine starts in 30-240 s on two busy cores, inside its first test
# fixture name -> the server kind it stands for
FIXTURE_KINDS = {"engine_server": "vllm", "sglang_dense": "sglang-dense", "sglang_hybrid": "sglang-hybrid"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "server_kind(name): the test uses the test server of that kind")
    config.addinivalue_line("markers", "own_engine: the test starts a real engine itself (runs last, pool emptied)")


def item_kinds(item: pytest.Item) -> list[str]:
    """The server kinds a collected test uses."""
    kinds: list[str] = []
    callspec = getattr(item, "callspec", None)
    if callspec is not None:  # a fixture parametrized by kind name (``server``, or a module's own, e.g. ``kv_server``)
        kinds += [v for v in callspec.params.values() if isinstance(v, str) and v in KINDS]
    kinds += [kind for fixture, kind in FIXTURE_KINDS.items() if fixture in getattr(item, "fixturenames", ())]
    kinds += [m.args[0] for m in item.iter_markers("server_kind")]
    return kinds


def _real(kinds: list[str]) -> list[str]:
    return [k for k in kinds if k in KINDS and KINDS[k].real]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by engine (``-m sglang`` / ``-m engine``) and run real-engine tests last, grouped by kind."""
    order: dict[str, int] = {}
    for item in items:
        real = _real(item_kinds(item))
        for kind in real:
            order.setdefault(kind, len(order))
            item.add_marker(pytest.mark.sglang if KINDS[kind].engine == "sglang" else pytest.mark.engine)
        if (real or item.get_closest_marker("own_engine")) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(REAL_ENGINE_TIMEOUT_S))  # the first test of a kind starts it

    def key(item: pytest.Item) -> int:
        if item.get_closest_marker("own_engine"):
            return 1 + len(order)
        real = _real(item_kinds(item))
        return 1 + min(order[k] for k in real) if real else 0

    items.sort(key=key)  # stable: the collection order within each group stays


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("servers"))
    yield pool
    pool.close()


@pytest.fixture
def sglang_dense(server_pool: ServerPool) -> LiveServer:
    """The real SGLang server with the tiny dense model (shared by the session)."""
    return live_server(server_pool, "sglang-dense")


@pytest.fixture
def sglang_hybrid(server_pool: ServerPool) -> LiveServer:
    """The real SGLang server with the tiny hybrid GDN model (shared by the session)."""
    return live_server(server_pool, "sglang-hybrid")


@pytest.fixture
def engines_down(server_pool: ServerPool) -> ServerPool:
    """For a test that starts a real engine itself: the pool's real engines are stopped first."""
    server_pool.stop_real()
    return server_pool


@pytest.fixture
def engine_server(server_pool: ServerPool) -> LiveServer:
    """The real vLLM server with the tiny dense model (shared by the session)."""
    return live_server(server_pool, "vllm")


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3]:
    """A moto S3 server for the module's tests (the test credentials are in the environment while it runs)."""
    from tests.helpers.s3server import moto_server  # boto3 and moto load only for the tests that use them

    with moto_server() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3) -> S3:
    """A new, empty bucket of this test's own on the module's S3 server."""
    return s3_server.fresh()


@pytest.fixture
def own_s3() -> Iterator[S3]:
    """An S3 server of this test's own, with one bucket, to stop and restart."""
    from tests.helpers.s3server import moto_server

    with moto_server() as server:
        yield server
