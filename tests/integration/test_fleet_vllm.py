"""The fleet launcher starting the real vLLM CPU server through the vllm command template, as on a GPU box."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.engines.pool import ServerPool
from tests.engines.vllm import MAX_MODEL_LEN, MODEL_DIR, SERVED_MODEL, build_model, engine_env, engine_python
from tokenmill.config import FleetSpec
from tokenmill.fleet import health
from tokenmill.fleet.local import local_fleet
from tokenmill.fleet.process import tail

pytestmark = [pytest.mark.engine, pytest.mark.own_engine]


def test_vllm_from_a_profile_serves_and_reports_idle(tmp_path: Path, engines_down: ServerPool) -> None:
    python = engine_python()  # skips (or fails under make test) when the engine is not installed
    build_model(python)
    wanted = engine_env(tmp_path / "vllm-cache")
    env: dict[str, str | None] = {k: wanted[k] for k in wanted if k.startswith(("VLLM_", "HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=None, VIRTUAL_ENV=None)
    profile = FleetSpec(
        engine="vllm",
        model=str(MODEL_DIR),
        python=str(python),
        gpus=1,
        base_port=0,
        flags={"served-model-name": SERVED_MODEL, "enforce-eager": True, "max-model-len": MAX_MODEL_LEN, "seed": 0},
        env=env,
        start_timeout_s=240,
        state_dir=str(tmp_path / "fleet"),
    )
    with local_fleet(profile) as fleet:
        (server,) = fleet.statuses()
        assert server.state == "up" and "vllm.entrypoints.openai.api_server" in server.command
        body = json.dumps(
            {"model": SERVED_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        ).encode()
        request = urllib.request.Request(
            server.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["usage"]["completion_tokens"] >= 1, tail(Path(server.log_path), 20)
        assert health.load(server.url) == 0  # vllm:num_requests_running + waiting, as the drain reads it
    logged = Path(server.log_path).read_text()
    assert "tokenmill fleet: starting server 0" in logged and "vllm" in logged.lower()
