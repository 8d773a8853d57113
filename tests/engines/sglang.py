"""The real SGLang server (0.5.23, CPU build) for the tests, serving the tiny models built locally.

The engine lives in its own environment (``make sglang`` builds ``.sglang-venv``) and runs with the
project's stand-in for its kernel library on ``PYTHONPATH`` (``engines/sglang_cpu``). The tiny models are
built by ``scripts/build_tiny_model.py`` (``make sglang-models``). Without ``.sglang-venv`` the SGLang tests
are skipped, unless ``TOKENMILL_REQUIRE_SGLANG`` is set (``make test`` sets it): then a missing environment
fails them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.engines.process import Launch, clean_env, require_venv, tail

ROOT = Path(__file__).resolve().parents[2]
SGLANG_VENV = ROOT / ".sglang-venv"
STAND_IN = ROOT / "engines" / "sglang_cpu"
DENSE_DIR = ROOT / ".cache" / "tiny-model"
HYBRID_DIR = ROOT / ".cache" / "tiny-hybrid"
REQUIRE_ENV = "TOKENMILL_REQUIRE_SGLANG"
VERSION = "0.5.23"
SERVED_MODEL = "tiny"
CONTEXT_LENGTH = 2048  # the tiny models' max_position_embeddings
DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: decode gauges are written this often
START_DEADLINE_S = 240.0  # 30-45 s on a quiet machine; much more on two busy cores
READY_LINE = "The server is fired up and ready to roll!"

# Pools capped: unbounded, SGLang sizes them from host RAM (15 GB, a minute to allocate).
KV_TOKENS = 8192
STATE_SLOTS = 64
COMMON_FLAGS = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--enable-metrics",
    "--sleep-on-idle",  # otherwise the idle scheduler busy-polls a core
    "--random-seed", "0",
)  # fmt: skip
HYBRID_FLAGS = (
    "--mamba-radix-cache-strategy", "no_buffer",  # extra_buffer (and auto) need GPU state snapshots
    "--disable-overlap-schedule",  # no_buffer refuses the overlap scheduler
    "--dtype", "float32",  # the float32 checkpoint, as transformers runs it (auto would run it in float16)
)  # fmt: skip


def sglang_python() -> Path:
    """The SGLang interpreter; skips (or fails, when SGLang is required) if it is not installed."""
    return require_venv(SGLANG_VENV, ".sglang-*", REQUIRE_ENV, "the SGLang CPU environment", "make sglang")


def build_model(python: Path, kind: str, out: Path) -> None:
    """Build a tiny model if it is missing (the builder skips a complete one)."""
    script = ROOT / "scripts" / "build_tiny_model.py"
    done = subprocess.run(
        [str(python), str(script), "--kind", kind, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"building the tiny {kind} model failed:\n{tail(done.stdout + done.stderr)}", pytrace=False)


def engine_env() -> dict[str, str | None]:
    """What every SGLang process of the tests needs: the CPU engine, the stand-in, no hub access."""
    return clean_env(
        SGLANG_USE_CPU_ENGINE="1",
        PYTHONPATH=str(STAND_IN),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1",  # two small servers and the tests share two cores
    )


def launch(name: str, model_dir: Path, flags: Sequence[str]) -> Launch:
    """An SGLang server for ``model_dir`` with the common test flags plus ``flags``."""
    python = sglang_python()

    def command(port: int) -> list[str]:
        return [
            str(python), "-m", "sglang.launch_server",
            "--model-path", str(model_dir),
            "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1",
            "--port", str(port),
            *COMMON_FLAGS,
            *flags,
        ]  # fmt: skip

    return Launch(
        name=name,
        command=command,
        env=engine_env(),
        deadline_s=START_DEADLINE_S,
        ready_path="/health",
        ready_log_line=READY_LINE,
        cwd=ROOT,
    )


def dense_flags(kv_tokens: int = KV_TOKENS, extra: Sequence[str] = ()) -> tuple[str, ...]:
    return ("--max-total-tokens", str(kv_tokens), *extra)


def hybrid_flags(slots: int = STATE_SLOTS, kv_tokens: int = KV_TOKENS, extra: Sequence[str] = ()) -> tuple[str, ...]:
    return ("--max-total-tokens", str(kv_tokens), "--max-mamba-cache-size", str(slots), *HYBRID_FLAGS, *extra)
