"""Server kinds the tests use, and a pool that starts each on demand and keeps few real engines up at once.

A real engine holds about 3 GB (SGLang) or more (vLLM); on a 24 GB machine that may be busy with other
work, the pool keeps at most ``TOKENMILL_TEST_ENGINES`` real engines up (default 1) and stops the least
recently used one before it starts another. The tests that use a real engine are grouped by kind (see
``tests/conftest.py``), so each one starts once per session. Twins are cheap and stay up.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tests.engines import sglang, twin, vllm
from tests.engines.process import Launch, Running, StartFailed, start

Engine = Literal["sglang", "vllm"]


@dataclass(frozen=True)
class ServerKind:
    """One kind of test server: what it is and how to launch it."""

    name: str
    engine: Engine
    real: bool  # a real engine (counts against the pool's limit), not the simulated twin
    hybrid: bool  # recurrent-state (Mamba/GDN) layers beside attention
    model_dir: Path
    max_model_len: int
    flags: tuple[str, ...] = ()  # SGLang flags beyond the common test flags
    launch: Callable[[Path], Launch] = field(repr=False, default=lambda _: NotImplemented)


@dataclass(frozen=True)
class LiveServer:
    """A running test server."""

    kind: ServerKind
    base_url: str
    log_path: Path
    ready_after_s: float
    model: str = sglang.SERVED_MODEL

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def engine(self) -> Engine:
        return self.kind.engine

    @property
    def real(self) -> bool:
        return self.kind.real

    @property
    def hybrid(self) -> bool:
        return self.kind.hybrid

    @property
    def model_dir(self) -> Path:
        return self.kind.model_dir

    @property
    def max_model_len(self) -> int:
        return self.kind.max_model_len

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def _sglang(name: str, hybrid: bool, flags: tuple[str, ...]) -> ServerKind:
    model_dir = sglang.HYBRID_DIR if hybrid else sglang.DENSE_DIR

    def make(workdir: Path) -> Launch:
        python = sglang.sglang_python()
        sglang.build_model(python, "hybrid" if hybrid else "dense", model_dir)
        return sglang.launch(name, model_dir, flags)

    return ServerKind(name, "sglang", True, hybrid, model_dir, sglang.CONTEXT_LENGTH, flags, make)


def _twin(name: str, of: ServerKind, extra: tuple[str, ...] = ()) -> ServerKind:
    def make(workdir: Path) -> Launch:
        return twin.launch(name, sglang.SERVED_MODEL, of.model_dir, of.flags, extra)

    return ServerKind(name, "sglang", False, of.hybrid, of.model_dir, of.max_model_len, of.flags, make)


SGLANG_DENSE = _sglang("sglang-dense", False, sglang.dense_flags())
SGLANG_HYBRID = _sglang("sglang-hybrid", True, sglang.hybrid_flags())
TWIN_DENSE = _twin("twin-dense", SGLANG_DENSE)
TWIN_HYBRID = _twin("twin-hybrid", SGLANG_HYBRID)
VLLM = ServerKind(
    "vllm", "vllm", True, False, vllm.MODEL_DIR, vllm.MAX_MODEL_LEN, (), lambda workdir: vllm.launch(workdir)
)
# One dense server for the conformance tests of non-default flags that leave each other's tests alone (a real
# engine starts in ~30 s, so each start saved counts): a running cap of 2 (6 short requests queue behind it), 256-token
# prefill chunks (a 1,000-token prompt alone), the qwen3 reasoning parser (the chat route only).
SGLANG_DENSE_FLAGGED = _sglang(
    "sglang-dense-flagged",
    False,
    sglang.dense_flags(
        extra=("--max-running-requests", "2", "--chunked-prefill-size", "256", "--reasoning-parser", "qwen3")
    ),
)
KINDS: dict[str, ServerKind] = {
    k.name: k for k in (SGLANG_DENSE, SGLANG_HYBRID, TWIN_DENSE, TWIN_HYBRID, VLLM, SGLANG_DENSE_FLAGGED)
}


def register(kind: ServerKind) -> ServerKind:
    """Add a kind (e.g. a server with its own flags for one test module); returns it."""
    KINDS.setdefault(kind.name, kind)
    return KINDS[kind.name]


def sglang_kind(name: str, hybrid: bool, flags: tuple[str, ...]) -> ServerKind:
    """A real SGLang kind with its own flags (registered, so the pool and the test ordering know it)."""
    return register(_sglang(name, hybrid, flags))


def twin_of(kind: ServerKind, time_scale: float | None = None) -> ServerKind:
    """The twin of ``kind``; ``time_scale`` paces it (its GPU's steps that many times longer in wall time)."""
    if time_scale is None:
        return register(_twin(f"twin-of-{kind.name}", kind))
    return register(_twin(f"twin-of-{kind.name}-x{time_scale:g}", kind, ("--time-scale", f"{time_scale:g}")))


class ServerPool:
    """Starts servers on demand, shares them between tests, keeps at most ``limit`` real engines up."""

    def __init__(self, workdir: Path, limit: int | None = None) -> None:
        self.workdir = workdir
        self.limit = limit if limit is not None else int(os.environ.get("TOKENMILL_TEST_ENGINES", "1"))
        self._up: OrderedDict[str, tuple[Running, LiveServer]] = OrderedDict()
        self.starts: list[str] = []  # every start, in order (a test of the pool reads it)
        self._failed: dict[str, str] = {}  # a kind that did not start is not tried again in this session

    def get(self, name: str) -> LiveServer:
        """The running server of kind ``name``, started (and older real engines stopped) when needed."""
        kind = KINDS[name]
        if name in self._up:
            self._up.move_to_end(name)
            return self._up[name][1]
        if name in self._failed:
            raise StartFailed(f"{name} failed to start earlier in this session:\n{self._failed[name]}")
        if kind.real:
            self._make_room()
        launch = kind.launch(self.workdir)
        try:
            running = start(launch, self.workdir / name)
        except StartFailed as exc:
            self._failed[name] = str(exc)
            raise
        live = LiveServer(kind, running.base_url, running.log_path, running.ready_after_s)
        self._up[name] = (running, live)
        self.starts.append(name)
        return live

    def _make_room(self) -> None:
        real = [n for n, (_, live) in self._up.items() if live.real]
        while len(real) >= max(1, self.limit):
            self.stop(real.pop(0))

    def stop(self, name: str) -> None:
        entry = self._up.pop(name, None)
        if entry is not None:
            entry[0].stop()

    def stop_real(self) -> None:
        """Stop every real engine (for a test that starts one itself)."""
        for name in [n for n, (_, live) in self._up.items() if live.real]:
            self.stop(name)

    def close(self) -> None:
        for name in list(self._up):
            self.stop(name)
