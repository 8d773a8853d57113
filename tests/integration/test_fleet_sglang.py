"""The fleet launcher starting the real SGLang CPU server from a profile, as on a GPU box: the profile says
``mamba-scheduler-strategy`` (the spelling before 0.5.14, which 0.5.23 refuses) and the fleet writes the
spelling of the release installed for the engine's Python."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.engines import sglang
from tests.engines.pool import ServerPool
from tokenmill.config import FleetSpec
from tokenmill.fleet.local import local_fleet
from tokenmill.fleet.process import tail
from tokenmill.fleet.template import installed_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.own_engine]


def test_sglang_from_a_profile_gets_the_flag_spelling_of_its_release(tmp_path: Path, engines_down: ServerPool) -> None:
    python = sglang.sglang_python()  # skips (or fails under make test) when SGLang is not installed
    sglang.build_model(python, "hybrid", sglang.HYBRID_DIR)
    assert installed_sglang(str(python)) == sglang.VERSION
    env = sglang.engine_env()
    profile = FleetSpec(
        engine="sglang",
        model=str(sglang.HYBRID_DIR),
        python=str(python),
        gpus=1,
        base_port=0,
        flags={
            "served-model-name": sglang.SERVED_MODEL,
            "mamba-scheduler-strategy": "no_buffer",  # renamed in 0.5.14, refused by 0.5.20 and later
            "disable-overlap-schedule": True,
            "max-mamba-cache-size": 16,
            "max-total-tokens": 4096,
            "device": "cpu",
            "attention-backend": "torch_native",
            "sleep-on-idle": True,
            "dtype": "float32",
        },
        env={k: env[k] for k in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
        start_timeout_s=sglang.START_DEADLINE_S,
        state_dir=str(tmp_path / "fleet"),
    )
    with local_fleet(profile) as fleet:
        (server,) = fleet.statuses()
        assert server.state == "up", tail(Path(server.log_path), 30)
        assert "--mamba-radix-cache-strategy no_buffer" in server.command
        with urllib.request.urlopen(server.url + "/server_info", timeout=30) as resp:
            info = json.loads(resp.read())
    assert info["version"] == sglang.VERSION
    assert info["mamba_radix_cache_strategy"] == "no_buffer" and info["max_mamba_cache_size"] == 16
