"""A fleet profile's servers as ``tokenmill plan --fleet PROFILE.yaml`` plans them.

Their flags (``--tp-size`` included, as the launch command passes it), the GPU count and the SGLang release; a
simulated twin's GPU, model and ``eta_bw`` too, and the model of any profile when the planner knows it (a bundled
name, its last path part, a config.json or a directory holding one). vLLM profiles are refused: the planner plans
SGLang.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from tokenmill.config import FlagValue, FleetSpec, SimSpec, load_profile
from tokenmill.errors import ConfigError
from tokenmill.fleet.template import flag_args
from tokenmill.planner.catalog import load_model

TP_FLAGS = ("--tp-size", "--tp")
SIM_FLAGS_FIELD = "engine_flags"  # a twin's SGLang flags in one string (`tokenmill sim --flags "..."`)
# SimSpec fields a twin takes as the SGLang flags of the same name (sim/twin.py, TwinStepModel.from_config)
SIM_SGLANG_FIELDS = ("max_running_requests", "max_total_tokens", "context_length")


@dataclass(frozen=True, slots=True)
class FleetServers:
    """A fleet profile's servers, as the planner plans them."""

    flags: tuple[str, ...]  # SGLang launch flags, as typed
    gpus: int
    model: str | None  # the planner's model, when it knows the profile's
    gpu: str | None  # a twin's GPU (a profile of real servers does not say which GPU it runs on)
    eta: float | None  # a twin's bandwidth efficiency
    sglang_version: str | None


def read_fleet(path: str | Path) -> FleetServers:
    """The servers of the fleet profile ``path``; a vLLM fleet is refused (the planner plans SGLang)."""
    profile = load_profile(path)
    if profile.engine == "vllm":
        raise ConfigError(f"{path} runs vLLM servers: the planner plans SGLang's (engine: sglang or sim)")
    if profile.engine == "sim":
        return _twin(profile)
    flags = [*flag_args(profile.flags), *profile.extra_args]
    if profile.tp_size > 1 and not any(word.partition("=")[0] in TP_FLAGS for word in flags):
        flags += ["--tp-size", str(profile.tp_size)]  # the launch command passes it
    return FleetServers(
        tuple(flags), len(profile.gpu_ids()), _known_model(profile.model), None, None, profile.sglang_version
    )


def _twin(profile: FleetSpec) -> FleetServers:
    """A fleet of twins: their own options (``gpu``, ``model-spec``, ``eta-bw``) apart from the SGLang flags."""
    own: dict[str, FlagValue] = {}
    sglang: dict[str, FlagValue] = {}
    for name, value in profile.flags.items():
        field = name.lstrip("-").replace("-", "_")
        field = SIM_FLAGS_FIELD if field == "flags" else field
        if field in SimSpec.model_fields and field not in SIM_SGLANG_FIELDS:
            own[field] = value
        else:
            sglang[name] = value
    words = [*flag_args(sglang), *profile.extra_args]
    if own.get(SIM_FLAGS_FIELD):
        words += shlex.split(str(own[SIM_FLAGS_FIELD]))
    model = str(own.get("model_spec") or profile.model)
    eta = own.get("eta_bw")
    gpu = own.get("gpu")
    return FleetServers(
        tuple(words),
        len(profile.gpu_ids()),
        _known_model(model),
        str(gpu) if gpu else None,
        float(eta) if isinstance(eta, int | float) and not isinstance(eta, bool) else None,
        profile.sglang_version,
    )


def _known_model(name: str) -> str | None:
    """``name`` (a model path or Hub id) or its last part, whichever the planner knows; None when neither."""
    for candidate in dict.fromkeys((name, name.rstrip("/").rsplit("/", 1)[-1])):
        try:
            load_model(candidate)
        except ConfigError:
            continue
        return candidate
    return None
