"""Bodies of the simulated server's descriptive endpoints: ``/server_info``, ``/model_info``, ``/v1/models``.

``/server_info`` follows SGLang: the server arguments, ``status``, ``max_total_num_tokens``,
``max_req_input_len``, and one ``internal_states`` entry (one DP rank) holding the arguments again plus
``last_gen_throughput``, ``memory_usage`` and ``effective_max_running_requests_per_dp``. The simulator's
own settings are under ``tokenmill_sim`` (never the API key). A twin reports the arguments as SGLang would
resolve them for its model, GPU and flags (strategy, pool sizes, max running), and its own account of every
pool number under ``tokenmill_twin``.
"""

from __future__ import annotations

from typing import Any

from tokenmill import __version__
from tokenmill.config import SimConfig
from tokenmill.sim.scheduler import SchedulerSnapshot
from tokenmill.sim.timing import StepModel
from tokenmill.sim.twin import TwinStepModel

VERSION = f"tokenmill-sim {__version__}"


def server_args(cfg: SimConfig, model: StepModel, host: str, port: int) -> dict[str, Any]:
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
        "max_mamba_cache_size": model.mamba_slots,
        "disable_radix_cache": True,
        "mamba_scheduler_strategy": "no_buffer",
        "schedule_policy": "fcfs",
        "page_size": 1,
        "tp_size": 1,
        "dp_size": 1,
        "enable_metrics": True,
        "decode_log_interval": cfg.decode_log_interval,
        "random_seed": cfg.seed,
    }
    if isinstance(model, TwinStepModel):
        args.update(model.server_args())
        args["model_path"] = cfg.model_spec or cfg.model
        args["engine_flags"] = cfg.engine_flags
    return args


def server_info(cfg: SimConfig, model: StepModel, snap: SchedulerSnapshot, host: str, port: int) -> dict[str, Any]:
    args = server_args(cfg, model, host, port)
    state = {
        **args,
        "last_gen_throughput": snap.gen_throughput,
        "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": model.max_total_tokens, "graph": 0.0},
        "effective_max_running_requests_per_dp": model.max_running_requests,
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
        "version": VERSION,
        "tokenmill_sim": cfg.model_dump(mode="json", exclude={"api_key", "host", "port"}),
    }
    if isinstance(model, TwinStepModel):
        body["max_req_input_len"] = model.max_req_input_len
        body["tokenmill_twin"] = model.describe()
    return body


def model_info(cfg: SimConfig) -> dict[str, Any]:
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


def model_card(cfg: SimConfig, created: int) -> dict[str, Any]:
    return {
        "id": cfg.model,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": cfg.model,
        "max_model_len": cfg.context_length,
    }
