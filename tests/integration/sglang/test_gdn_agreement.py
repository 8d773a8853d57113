"""The kernel stand-in's Gated-DeltaNet ops are right: against a step-by-step recurrence, and the real SGLang
server serving the tiny hybrid decodes greedily exactly as transformers does, token for token (prefill and
decode, chunked prefill, concurrent batches, prompts resumed from the prefix cache)."""

from __future__ import annotations

import subprocess

import pytest

from tests.engines import sglang
from tests.engines.pool import LiveServer
from tests.engines.process import tail
from tokenmill.fleet.process import server_env

pytestmark = pytest.mark.sglang

TIMEOUT_S = 900


def test_gdn_ops_match_a_step_by_step_recurrence() -> None:
    python = sglang.sglang_python()
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(sglang.STAND_IN)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=server_env(sglang.engine_env()),
        check=False,
    )
    assert done.returncode == 0, tail(done.stdout + done.stderr)
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_hybrid_greedy_output_agrees_with_transformers(sglang_hybrid: LiveServer) -> None:
    python = sglang.sglang_python()
    checker = sglang.STAND_IN / "check_agreement.py"
    done = subprocess.run(
        [str(python), str(checker), "--server", sglang_hybrid.base_url, "--model", str(sglang_hybrid.model_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=server_env(sglang.engine_env()),
        check=False,
    )
    assert done.returncode == 0, tail(done.stdout + done.stderr)
