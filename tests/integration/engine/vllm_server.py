"""Starting and stopping a real vLLM CPU server for the engine tests.

The engine lives in its own environment (``make engine`` builds ``.engine-venv``) and serves a tiny
random-weight model built locally by ``scripts/build_tiny_model.py``. Without ``.engine-venv`` the engine
tests are skipped, unless ``TOKENMILL_REQUIRE_ENGINE`` is set (``make test`` sets it): then a missing
engine fails them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ENGINE_VENV = ROOT / ".engine-venv"
MODEL_DIR = ROOT / ".cache" / "tiny-model"
REQUIRE_ENV = "TOKENMILL_REQUIRE_ENGINE"
SERVED_MODEL = "tiny"
MAX_MODEL_LEN = 512
START_DEADLINE_S = 180.0
STOP_GRACE_S = 20.0
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class EngineServer:
    """A running vLLM server: where it listens, what it serves, and how long it took to come up."""

    base_url: str
    model: str
    model_dir: Path
    max_model_len: int
    log_path: Path
    ready_after_s: float


def _required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def _engine_python() -> Path:
    """The engine interpreter; skips (or fails, when the engine is required) if it is not installed."""
    if not ENGINE_VENV.is_dir():
        reason = f"the vLLM CPU engine is not installed ({ENGINE_VENV} is missing); run `make engine`"
        if _required():
            pytest.fail(f"{reason}. {REQUIRE_ENV} is set, so the engine tests must run.", pytrace=False)
        pytest.skip(reason)
    if not any(ENGINE_VENV.glob(".engine-*")):
        pytest.fail(f"{ENGINE_VENV} has no install stamp (an interrupted install?); run `make engine`", False)
    return ENGINE_VENV / "bin" / "python"


def _build_model(python: Path) -> None:
    script = ROOT / "scripts" / "build_tiny_model.py"
    done = subprocess.run(
        [str(python), str(script), str(MODEL_DIR)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"building the tiny model failed:\n{_tail(done.stdout + done.stderr)}", pytrace=False)


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


def _log_tail(path: Path) -> str:
    return _tail(path.read_text(errors="replace")) if path.exists() else "(no log)"


def _free_port() -> int:
    """A port free right now; vLLM cannot listen on port 0, so the caller retries if it is taken."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _engine_env(cache_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_HOST_IP="127.0.0.1",  # keeps the engine's message queue on loopback
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB
        VLLM_CACHE_ROOT=str(cache_root),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


def _launch(python: Path, port: int, workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = workdir / f"vllm-{port}.log"
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",  # `vllm serve` is broken in vllm-cpu
        "--model", str(MODEL_DIR),
        "--served-model-name", SERVED_MODEL,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--enforce-eager",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--seed", "0",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_engine_env(workdir / "vllm-cache"),
            cwd=workdir,
            start_new_session=True,  # its own process group, so stopping it reaches the engine core too
        )
    return proc, log_path


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str) -> str | None:
    """None once /health answers 200; otherwise why the server never became ready."""
    deadline = time.monotonic() + START_DEADLINE_S
    while not _healthy(base_url):
        if time.monotonic() > deadline:
            return f"not ready after {START_DEADLINE_S:.0f} s"
        try:
            code = proc.wait(timeout=0.5)  # the pause between probes; returns at once if the server dies
        except subprocess.TimeoutExpired:
            continue
        return f"exited with code {code} before it was ready"
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, wait for it, then SIGKILL whatever is left."""
    pgid = proc.pid  # session leader: its pid is the group id
    if proc.poll() is None:
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    while _group_alive(pgid) and time.monotonic() < deadline:  # children may outlive the API server
        time.sleep(0.1)
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()


def start_engine_server(workdir: Path) -> Iterator[EngineServer]:
    """Generator for a fixture: build the model if needed, start vLLM, yield it, stop it.

    vLLM cannot listen on port 0, so a free port is picked and the start is retried if another process
    took that port in between. A server that dies or is not ready in time fails the tests with its log.
    """
    python = _engine_python()
    _build_model(python)
    failures: list[str] = []
    for _ in range(PORT_ATTEMPTS):
        port = _free_port()
        base_url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        proc, log_path = _launch(python, port, workdir)
        try:
            problem = _wait_ready(proc, base_url)
        except BaseException:
            _stop(proc)
            raise
        if problem is None:
            try:
                yield EngineServer(
                    base_url=base_url,
                    model=SERVED_MODEL,
                    model_dir=MODEL_DIR,
                    max_model_len=MAX_MODEL_LEN,
                    log_path=log_path,
                    ready_after_s=time.monotonic() - started,
                )
            finally:
                _stop(proc)
            return
        _stop(proc)
        tail = _log_tail(log_path)
        failures.append(f"vLLM on port {port} {problem}; log {log_path}, last lines:\n{tail}")
        if "address already in use" not in tail.lower():
            break  # only a lost race for the port is worth another try
    pytest.fail("\n\n".join(failures), pytrace=False)


def decodes_to(decoded: str, text: str) -> bool:
    """Whether ``decoded`` (the token ids decoded in one go) is the text the engine returned.

    vLLM detokenizes incrementally and drops a trailing incomplete UTF-8 sequence, which a one-shot
    decode renders as U+FFFD; everything before it is identical.
    """
    return decoded.startswith(text) and not decoded[len(text) :].strip("\ufffd")
