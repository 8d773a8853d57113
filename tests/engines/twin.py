"""The twin (``tokenmill sim --gpu``) in the configuration of a real test server: the same model config,
the same SGLang flags, started as users start it (``python -m tokenmill sim``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tests.engines.process import Launch, clean_env

TWIN_GPU = "rtx-pro-6000"  # the pools are capped by the flags, so the GPU sets only the step times
START_DEADLINE_S = 60.0


def launch(name: str, served_model: str, model_dir: Path, flags: Sequence[str], extra: Sequence[str] = ()) -> Launch:
    """A twin of the SGLang server that ``model_dir`` and ``flags`` describe."""

    def command(port: int) -> list[str]:
        return [
            sys.executable, "-m", "tokenmill", "sim",
            "--port", str(port),
            "--model", served_model,
            "--model-spec", str(model_dir / "config.json"),
            "--gpu", TWIN_GPU,
            *extra,
            *flags,
        ]  # fmt: skip

    env = clean_env(PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    return Launch(name=name, command=command, env=env, deadline_s=START_DEADLINE_S)
