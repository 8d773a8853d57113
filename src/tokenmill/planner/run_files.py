"""The run a plan is for, read from its files: a job file's requests and input, a fleet profile's servers.

``tokenmill plan --job JOB.yaml`` plans the job's requests: their ``sampling.max_tokens``, whether they send
``ignore_eos`` (``sampling.extra_body.ignore_eos: true``), the prompt lengths of a local input (measured on its
first rows with its own mapping and window, with the job's tokenizer when it has one) and their count (times
``samples``); a Hugging Face input is not read. ``--fleet PROFILE.yaml`` plans the profile's servers: their flags
(``--tp-size`` included), the GPU count and the SGLang release; a simulated twin's GPU, model and ``eta_bw`` too,
and the model of any profile when the planner knows it (a bundled name, a config.json or a directory holding one).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.config import FleetProfile, InputSpec, JobSpec, SimConfig, load_job, load_profile
from tokenmill.errors import ConfigError
from tokenmill.planner.catalog import load_model

TP_FLAGS = ("--tp-size", "--tp")
SIM_FLAGS_FIELD = "engine_flags"  # a twin's SGLang flags in one string (`tokenmill sim --flags "..."`)
# SimConfig fields a twin takes as the SGLang flags of the same name (sim/twin.py, TwinStepModel.from_config)
SIM_SGLANG_FIELDS = ("max_running_requests", "max_total_tokens", "context_length")


def sends_ignore_eos(extra_body: Mapping[str, Any]) -> bool:
    """Whether a job's requests carry ``ignore_eos: true`` (in ``sampling.extra_body``, merged into every body)."""
    return extra_body.get("ignore_eos") is True


@dataclass(frozen=True, slots=True)
class JobRequests:
    """What a job sends and reads, as the planner plans it."""

    max_tokens: int
    ignore_eos: bool
    input: InputSpec | None  # a local input to measure (None: a Hugging Face dataset, not read)
    answers_per_row: int
    tokenizer: str | None
    planner_model: str | None  # monitor.planner_model
    gpu: str | None  # monitor.gpu
    gpu_file: str | None


def read_job(path: str | Path) -> JobRequests:
    """The requests and input of the job file ``path`` (validated as ``tokenmill run`` validates it)."""
    job: JobSpec = load_job(path)
    return JobRequests(
        max_tokens=job.sampling.max_tokens,
        ignore_eos=sends_ignore_eos(job.sampling.extra_body),
        input=job.input if job.input.path is not None else None,
        answers_per_row=job.samples,
        tokenizer=job.tokenizer,
        planner_model=job.monitor.planner_model,
        gpu=job.monitor.gpu,
        gpu_file=job.monitor.gpu_file,
    )


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
    from tokenmill.fleet.template import flag_args

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


def _twin(profile: FleetProfile) -> FleetServers:
    """A fleet of twins: their own options (``gpu``, ``model-spec``, ``eta-bw``) apart from the SGLang flags."""
    from tokenmill.config import FlagValue
    from tokenmill.fleet.template import flag_args

    own: dict[str, FlagValue] = {}
    sglang: dict[str, FlagValue] = {}
    for name, value in profile.flags.items():
        field = name.lstrip("-").replace("-", "_")
        field = SIM_FLAGS_FIELD if field == "flags" else field
        if field in SimConfig.model_fields and field not in SIM_SGLANG_FIELDS:
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
