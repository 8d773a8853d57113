"""Bodies of the simulated server's descriptive endpoints: ``/server_info``, ``/model_info``, ``/v1/models``.

``/server_info`` follows SGLang 0.5.23 (checked against a real server by tests/conformance): the server
arguments at the top level as the launcher resolved them (flags as given, ``None`` where SGLang decides),
``version``, ``status``, ``max_total_num_tokens``, ``max_req_input_len``, and one ``internal_states`` entry
(one DP rank) holding the arguments again with the scheduler's computed values (``max_mamba_cache_size``,
``effective_max_running_requests_per_dp``, ``memory_usage``, ``last_gen_throughput``). The simulator's own
settings are under ``tokenmill_sim`` (never the API key); a twin adds its account of every pool number under
``tokenmill_twin``.

Without the twin, the simulator is a server launched with its caps given as flags
(``--max-running-requests``, ``--max-total-tokens``) and the radix cache off, one state slot per request.
"""

from __future__ import annotations

from typing import Any

from tokenmill.config import PlannerSpec, SimSpec
from tokenmill.sim import twin_report
from tokenmill.sim.scheduler import SchedulerSnapshot
from tokenmill.sim.timing import StepModel
from tokenmill.sim.twin import TwinStepModel

#: The SGLang release whose API, metrics and /server_info the simulated server imitates.
SGLANG_VERSION = PlannerSpec().sglang_version


def server_args(cfg: SimSpec, model: StepModel, host: str, port: int) -> dict[str, Any]:
    """The subset of SGLang's ``ServerArgs`` a client may read, with the simulator's values."""
    args: dict[str, Any] = {
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "served_model_name": cfg.model,
        "host": host,
        "port": port,
        "context_length": cfg.context_length,
        "max_running_requests": cfg.max_running_requests,
        "max_queued_requests": cfg.max_queued_requests,
        "max_total_tokens": model.max_total_tokens,
        "max_mamba_cache_size": None,
        "disable_radix_cache": True,
        "mamba_radix_cache_strategy": "auto",
        "disable_overlap_schedule": False,
        "schedule_policy": "fcfs",
        "page_size": 1,
        "tp_size": 1,
        "dp_size": 1,
        "enable_metrics": True,
        "decode_log_interval": cfg.decode_log_interval,
        "random_seed": cfg.seed,
        "enable_deterministic_inference": False,  # as a default launch (the simulated answers are seeded anyway)
        "reasoning_parser": cfg.reasoning_parser,
    }
    if isinstance(model, TwinStepModel):
        args.update(twin_report.server_args(model))
        args["model_path"] = cfg.model_spec or cfg.model
        args["engine_flags"] = cfg.engine_flags
    return args


def _computed(model: StepModel) -> dict[str, Any]:
    if isinstance(model, TwinStepModel):
        return twin_report.computed_state(model)
    return {
        "max_mamba_cache_size": model.mamba_slots or None,
        "effective_max_running_requests_per_dp": model.max_running_requests,
    }


def server_info(cfg: SimSpec, model: StepModel, snap: SchedulerSnapshot, host: str, port: int) -> dict[str, Any]:
    args = server_args(cfg, model, host, port)
    state = {
        **args,
        **_computed(model),
        "last_gen_throughput": float(snap.gen_throughput),
        "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": model.max_total_tokens, "graph": 0.0},
    }
    if isinstance(model, TwinStepModel):
        pools = model.capacity.pools
        state["memory_usage"] = {
            "weight": round(pools.weights_gib, 2),
            "kvcache": round(pools.kv_gib + pools.state_gib, 2),
            "token_capacity": model.max_total_tokens,
            "graph": 0.0,
        }
    body = {
        **args,
        "status": "ready",
        "max_total_num_tokens": model.max_total_tokens,
        "max_req_input_len": cfg.context_length - 1,
        "internal_states": [state],
        "version": SGLANG_VERSION,
        "tokenmill_sim": cfg.model_dump(mode="json", exclude={"api_key", "host", "port"}),
    }
    if isinstance(model, TwinStepModel):
        body["max_req_input_len"] = model.max_req_input_len
        body["tokenmill_twin"] = twin_report.describe(model)
    return body


def model_info(cfg: SimSpec) -> dict[str, Any]:
    return {
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "tokenmill-sim",
        "architectures": ["TokenmillSimForCausalLM"],
    }


def model_card(cfg: SimSpec, created: int) -> dict[str, Any]:
    return {
        "id": cfg.model,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": cfg.model,
        "max_model_len": cfg.context_length,
    }
