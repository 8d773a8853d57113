"""What a server says about its own set-up: SGLang's ``/server_info`` (or ``/v1/loads``) as a typed record.

``/server_info`` is heavy on SGLang, so it is read once per server (and again after the server comes back
from being down: it may have been restarted with other flags). :func:`launch_flags` turns the record back
into the SGLang flags that size its pools, so the doctor can recommend changes relative to them and the
planner can predict both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from tokenmill.monitor.scrape import max_running_from_server_info

OLD_STRATEGY_FLAG = "--mamba-scheduler-strategy"
NEW_STRATEGY_FLAG = "--mamba-radix-cache-strategy"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The settings of one server that matter to throughput; ``None`` where it does not say.

    SGLang's ``/server_info`` holds the launch flags at the top level (``None`` where SGLang decides) and the
    scheduler's computed values in ``internal_states`` (one entry per DP rank): the effective running cap
    and the state slots are read from there, the flags from the top level.
    """

    max_running: int | None  # effective cap, summed over DP ranks
    model_path: str | None = None
    strategy: str | None = None  # the Mamba radix-cache strategy (hybrids; None for a dense model)
    strategy_flag: str = NEW_STRATEGY_FLAG  # the spelling this server's build knows
    disable_radix_cache: bool | None = None
    disable_overlap_schedule: bool | None = None
    mamba_ssm_dtype: str | None = None
    state_slots: int | None = None  # recurrent-state slots per rank as the server sized them (None: none/unknown)
    hybrid: bool | None = None  # a recurrent-state pool exists (None: the server does not say)
    max_mamba_cache_size: int | None = None  # --max-mamba-cache-size as given (None: sized by SGLang)
    max_running_flag: int | None = None  # --max-running-requests as given (None: automatic)
    max_total_tokens: int | None = None  # KV pool, tokens per rank, as the server sized it
    max_total_tokens_flag: int | None = None  # --max-total-tokens as given
    mem_fraction_static: float | None = None
    tp_size: int = 1
    dp_size: int = 1
    page_size: int | None = None
    chunked_prefill_size: int | None = None
    context_length: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    schedule_conservativeness: float | None = None
    speculative_algorithm: str | None = None
    gpu: str | None = None  # only the simulated twin knows its GPU
    time_scale: float | None = None  # a simulated server's: its rates are 1/time_scale times the GPU's
    version: str | None = None
    deterministic: bool | None = None  # --enable-deterministic-inference: without it SGLang ignores request seeds

    @property
    def gpus(self) -> int:
        """GPUs behind this endpoint (TP x DP)."""
        return max(1, self.tp_size) * max(1, self.dp_size)

    @property
    def radix_cache(self) -> bool:
        return self.disable_radix_cache is False


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _ranks(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    states = info.get("internal_states")
    return [s for s in states if isinstance(s, Mapping)] if isinstance(states, list) else []


def _state_slots(info: Mapping[str, Any], ranks: list[Mapping[str, Any]]) -> tuple[int | None, bool | None]:
    """Slots per rank and whether a state pool exists: the scheduler's computed ``max_mamba_cache_size``
    (``internal_states``; ``None`` there means no state pool), else the launch flag when given."""
    if ranks and any("max_mamba_cache_size" in r for r in ranks):
        sizes = [_int(r.get("max_mamba_cache_size")) for r in ranks]
        known = [v for v in sizes if v]
        return (max(known), True) if known else (None, False)
    flag = _int(info.get("max_mamba_cache_size"))
    return (flag, True) if flag else (None, None)


def _strategy(info: Mapping[str, Any], ranks: list[Mapping[str, Any]], hybrid: bool | None) -> tuple[str | None, str]:
    """The strategy as the scheduler resolved it, and the flag spelling the build's arguments carry."""
    key = "mamba_radix_cache_strategy" if "mamba_radix_cache_strategy" in info else "mamba_scheduler_strategy"
    flag = NEW_STRATEGY_FLAG if key == "mamba_radix_cache_strategy" else OLD_STRATEGY_FLAG
    if key not in info and not ranks:
        flag = NEW_STRATEGY_FLAG
    if hybrid is False:
        return None, flag
    value = next((_str(r.get(key)) for r in ranks if _str(r.get(key))), None) or _str(info.get(key))
    return value, flag


def parse_server_info(info: Mapping[str, Any]) -> ServerInfo:
    """A :class:`ServerInfo` from a ``/server_info`` body; unknown or missing fields stay ``None``."""
    ranks = _ranks(info)
    slots, hybrid = _state_slots(info, ranks)
    strategy, strategy_flag = _strategy(info, ranks, hybrid)
    sim = info.get("tokenmill_sim")
    gpu = _str(sim.get("gpu")) if isinstance(sim, Mapping) else None
    time_scale = _float(sim.get("time_scale")) if isinstance(sim, Mapping) else None
    return ServerInfo(
        max_running=max_running_from_server_info(info),
        model_path=_str(info.get("model_path")),
        strategy=strategy,
        strategy_flag=strategy_flag,
        disable_radix_cache=_bool(info.get("disable_radix_cache")),
        disable_overlap_schedule=_bool(info.get("disable_overlap_schedule")),
        mamba_ssm_dtype=_str(info.get("mamba_ssm_dtype")),
        state_slots=slots,
        hybrid=hybrid,
        max_mamba_cache_size=_int(info.get("max_mamba_cache_size")),
        max_running_flag=_int(info.get("max_running_requests")),
        max_total_tokens=_int(info.get("max_total_num_tokens")) or _int(info.get("max_total_tokens")),
        max_total_tokens_flag=_int(info.get("max_total_tokens")),
        mem_fraction_static=_float(info.get("mem_fraction_static")),
        tp_size=_int(info.get("tp_size")) or 1,
        dp_size=_int(info.get("dp_size")) or 1,
        page_size=_int(info.get("page_size")),
        chunked_prefill_size=_int(info.get("chunked_prefill_size")),
        context_length=_int(info.get("context_length")),
        kv_cache_dtype=_str(info.get("kv_cache_dtype")),
        quantization=_str(info.get("quantization")),
        schedule_conservativeness=_float(info.get("schedule_conservativeness")),
        speculative_algorithm=_str(info.get("speculative_algorithm")),
        gpu=gpu,
        time_scale=time_scale if time_scale is not None and time_scale > 0 else None,
        version=_str(info.get("version")),
        deterministic=_bool(info.get("enable_deterministic_inference")),
    )


def parse_loads(loads: Mapping[str, Any]) -> ServerInfo | None:
    """The cap from a ``/v1/loads`` body (SGLang, Jan 2026 on): ``max_running_requests`` summed over ranks."""
    ranks = loads.get("loads")
    if not isinstance(ranks, list):
        return None
    caps = [_int(r.get("max_running_requests")) for r in ranks if isinstance(r, Mapping)]
    known = [c for c in caps if c is not None]
    return ServerInfo(max_running=sum(known)) if known else None


def launch_flags(info: ServerInfo) -> list[str]:
    """The SGLang flags that reproduce this server's pool sizing (what the planner models)."""
    flags: list[str] = []
    if info.tp_size != 1:
        flags += ["--tp-size", str(info.tp_size)]
    if info.quantization:
        flags += ["--quantization", info.quantization]
    if info.mem_fraction_static is not None:
        flags += ["--mem-fraction-static", f"{info.mem_fraction_static:g}"]
    if info.strategy:
        flags += [info.strategy_flag, info.strategy]
    if info.disable_radix_cache:
        flags.append("--disable-radix-cache")
    if info.disable_overlap_schedule:
        flags.append("--disable-overlap-schedule")
    if info.max_running_flag is not None:
        flags += ["--max-running-requests", str(info.max_running_flag)]
    if info.max_mamba_cache_size is not None:
        flags += ["--max-mamba-cache-size", str(info.max_mamba_cache_size)]
    if info.max_total_tokens_flag is not None:
        flags += ["--max-total-tokens", str(info.max_total_tokens_flag)]
    if info.mamba_ssm_dtype:
        flags += ["--mamba-ssm-dtype", info.mamba_ssm_dtype]
    if info.kv_cache_dtype and info.kv_cache_dtype != "auto":
        flags += ["--kv-cache-dtype", info.kv_cache_dtype]
    if info.page_size is not None and info.page_size != 1:
        flags += ["--page-size", str(info.page_size)]
    if info.context_length is not None:
        flags += ["--context-length", str(info.context_length)]
    return flags


async def _get_json(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]) -> Any:
    async with session.get(url, headers=headers) as resp:
        if resp.status != 200:
            return None
        return await resp.json(content_type=None)


async def fetch_server_info(
    session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str] | None = None
) -> ServerInfo | None:
    """``/server_info``, else ``/v1/loads?include=core``; ``None`` when neither answers (vLLM, old builds)."""
    base_url = base_url.rstrip("/")
    hdrs = dict(headers or {})
    for path, parse in (("/server_info", parse_server_info), ("/v1/loads?include=core", parse_loads)):
        try:
            body = await _get_json(session, base_url + path, hdrs)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            continue
        if isinstance(body, Mapping):
            info = parse(body)
            if info is not None:
                return info
    return None
