"""SGLang launch flags, parsed from their real spellings and rendered back.

``parse_flags("--mamba-scheduler-strategy extra_buffer --mem-fraction-static 0.9")`` gives an
:class:`EngineFlags`. Both spellings of the renamed flags are accepted (``--mamba-scheduler-strategy`` /
``--mamba-radix-cache-strategy``, ``--cuda-graph-max-bs`` / ``--cuda-graph-max-bs-decode``), ``--flag=value``
and ``--flag value`` forms, and ``VAR=value`` environment assignments for the variables that change sizing
(``SGLANG_MAMBA_SSM_DTYPE``, ``SGLANG_MAMBA_CONV_DTYPE``, ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK``). Flags the
planner does not model are kept in :attr:`EngineFlags.ignored` so the plan can say so. Values mirror
SGLang's defaults where unset (``None`` = SGLang decides; docs/reference/sglang.md §1).

Which spelling a server accepts depends on its release (read from the released wheels' ``server_args.py``):
up to 0.5.13 only the old names exist; 0.5.14 adds the new names and keeps the old ones as deprecated aliases
(``DeprecatedAliasStoreAction``); 0.5.20 drops the old names (an unknown flag stops the server).
:func:`strategy_flag_for` and :func:`graph_bs_flag_for` give the spelling for a version, and
:func:`command_line` renders with them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from tokenmill.errors import ConfigError
from tokenmill.planner.models import KvDtype, StateDtype, WeightDtype

Strategy = Literal["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"]
STRATEGIES: tuple[Strategy, ...] = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")

OLD_STRATEGY_FLAG = "--mamba-scheduler-strategy"
NEW_STRATEGY_FLAG = "--mamba-radix-cache-strategy"
OLD_GRAPH_BS_FLAG = "--cuda-graph-max-bs"
NEW_GRAPH_BS_FLAG = "--cuda-graph-max-bs-decode"

Release = tuple[int, int, int]

#: First release with the new flag names and the new ``auto`` rule (sglang PR #28151, in 0.5.14).
NEW_NAMES_SINCE: Release = (0, 5, 14)
#: First release without the old flag names (0.5.19 still registers them as deprecated aliases).
OLD_NAMES_REMOVED_IN: Release = (0, 5, 20)

#: SGLang's --mamba-full-memory-ratio default (docs/reference/sglang.md §1.1, docs/reference/hardware.md [S-SA]).
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9

_SSM_DTYPES: dict[str, StateDtype] = {
    "float32": "fp32",
    "fp32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
}
_SSM_FLAG_VALUE: dict[StateDtype, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_KV_DTYPES: dict[str, KvDtype | None] = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "bf16",
    "float16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8": "fp8",
}
_QUANT_DTYPES: dict[str, WeightDtype] = {
    "fp8": "fp8",
    "w8a8_fp8": "fp8",
    "modelopt": "fp8",
    "modelopt_fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt_fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "w4afp8": "fp4",
}
_QUANT_FLAG_VALUE: dict[WeightDtype, str] = {"fp8": "fp8", "fp4": "modelopt_fp4"}

_BOOL_FLAGS = {
    "--disable-radix-cache": "disable_radix_cache",
    "--disable-overlap-schedule": "disable_overlap_schedule",
    "--enable-dp-attention": "enable_dp_attention",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-prefill-cuda-graph": "disable_prefill_graph",
    "--disable-piecewise-cuda-graph": "disable_prefill_graph",  # the same switch before 0.5.14
}
_INT_FLAGS = {
    "--max-mamba-cache-size": "max_mamba_cache_size",
    "--max-running-requests": "max_running_requests",
    "--max-total-tokens": "max_total_tokens",
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--tp": "tp_size",
    "--dp-size": "dp_size",
    "--data-parallel-size": "dp_size",
    "--dp": "dp_size",
    "--page-size": "page_size",
    "--chunked-prefill-size": "chunked_prefill_size",
    OLD_GRAPH_BS_FLAG: "cuda_graph_max_bs",
    NEW_GRAPH_BS_FLAG: "cuda_graph_max_bs",
    "--context-length": "context_length",
    "--mamba-track-interval": "mamba_track_interval",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
}
_FLOAT_FLAGS = {
    "--mem-fraction-static": "mem_fraction_static",
    "--mamba-full-memory-ratio": "mamba_full_memory_ratio",
}
_STR_FLAGS = {
    "--model-path": "model_path",
    "--model": "model_path",
    "--speculative-algorithm": "speculative_algorithm",
}
# 0.5.14+ per-phase CUDA-graph backends: only "disabled" changes what the planner models
_GRAPH_BACKEND_FLAGS = {
    "--cuda-graph-backend-prefill": "disable_prefill_graph",
    "--cuda-graph-backend-decode": "disable_decode_graph",
}
_ENV_VARS = ("SGLANG_MAMBA_SSM_DTYPE", "SGLANG_MAMBA_CONV_DTYPE", "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK")


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """The SGLang settings that size pools or change decode speed; ``None`` = SGLang's automatic value."""

    mem_fraction_static: float | None = None
    mamba_strategy: Strategy = "auto"
    strategy_flag: str | None = None  # the spelling the strategy was given in (None: not given)
    mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: StateDtype | None = None
    mamba_conv_dtype: StateDtype = "bf16"
    skip_decode_lock: bool = False
    mamba_track_interval: int = 256
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    kv_cache_dtype: KvDtype | None = None
    weight_dtype: WeightDtype | None = None  # from --quantization; None = the checkpoint's
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    page_size: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None  # the decode CUDA graph's largest batch
    disable_cuda_graph: bool = False  # both phases
    disable_prefill_graph: bool = False
    disable_decode_graph: bool = False
    context_length: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    model_path: str | None = None
    ignored: tuple[str, ...] = ()

    def with_(self, **changes: object) -> EngineFlags:
        """A copy with some fields changed (what-if rows)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def sglang_release(version: str | None) -> Release | None:
    """``"0.5.23"`` (or ``"v0.5.10.post1"``, ``"0.5.14rc2"``) as ``(0, 5, 23)``; ``None`` for no version or one
    that does not start with numbers (a development build), which the planner treats as the newest."""
    if not version:
        return None
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _has_new_names(version: str | None) -> bool:
    release = sglang_release(version)
    return release is None or release >= NEW_NAMES_SINCE


def strategy_flag_for(version: str | None) -> str:
    """The strategy flag a server of ``version`` accepts: ``--mamba-scheduler-strategy`` up to 0.5.13,
    ``--mamba-radix-cache-strategy`` from 0.5.14 (the only one from 0.5.20); unknown: the newest."""
    return NEW_STRATEGY_FLAG if _has_new_names(version) else OLD_STRATEGY_FLAG


def graph_bs_flag_for(version: str | None) -> str:
    """The decode CUDA-graph batch flag of ``version``: ``--cuda-graph-max-bs`` up to 0.5.13,
    ``--cuda-graph-max-bs-decode`` from 0.5.14 (the only one from 0.5.20); unknown: the newest."""
    return NEW_GRAPH_BS_FLAG if _has_new_names(version) else OLD_GRAPH_BS_FLAG


def auto_prefers_extra_buffer(version: str | None) -> bool:
    """Whether ``auto`` can pick ``extra_buffer`` on ``version`` (from 0.5.14, sglang PR #28151); releases up
    to 0.5.13 resolve ``auto`` to ``no_buffer`` for every model."""
    return _has_new_names(version)


def _value(flag: str, raw: str | None) -> str:
    if raw is None or raw.startswith("--"):
        raise ConfigError(f"SGLang flag {flag} needs a value, e.g. `{flag} 0.9`")
    return raw


def _as_int(flag: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{flag} takes an integer, got {raw!r}") from exc
    if value < 0 and flag != "--chunked-prefill-size":
        raise ConfigError(f"{flag} must not be negative, got {value}")
    return value


def _as_float(flag: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{flag} takes a number, got {raw!r}") from exc


def _choice(flag: str, raw: str, table: dict[str, object]) -> object:
    key = raw.lower()
    if key not in table:
        raise ConfigError(f"{flag} {raw!r} is not understood; use one of: {', '.join(table)}")
    return table[key]


def _tokens(flags: str | Sequence[str]) -> list[str]:
    if isinstance(flags, str):
        try:
            return shlex.split(flags)
        except ValueError as exc:
            raise ConfigError(f"cannot split the flags string ({exc}); check its quotes") from exc
    out: list[str] = []
    for item in flags:
        out.extend(_tokens(item))
    return out


def parse_flags(flags: str | Sequence[str] = "") -> EngineFlags:
    """Parse SGLang launch flags (a string or a list of strings); ConfigError on bad values."""
    tokens = _tokens(flags)
    fields: dict[str, object] = {}
    ignored: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("--"):
            name, eq, raw_env = tok.partition("=")
            if eq and name in _ENV_VARS:
                _apply_env(name, raw_env, fields)
            elif eq and name.isupper():
                ignored.append(tok)
            # other positional words (python, -m, sglang.launch_server) carry nothing to model
            continue
        flag, eq, inline = tok.partition("=")
        flag = flag.replace("_", "-")
        raw: str | None = inline if eq else None
        if flag in _BOOL_FLAGS:
            fields[_BOOL_FLAGS[flag]] = True
            continue
        takes_value = (
            flag in _INT_FLAGS
            or flag in _FLOAT_FLAGS
            or flag in _STR_FLAGS
            or flag in _GRAPH_BACKEND_FLAGS
            or flag in (OLD_STRATEGY_FLAG, NEW_STRATEGY_FLAG, "--mamba-ssm-dtype", "--kv-cache-dtype", "--quantization")
        )
        if takes_value and raw is None:
            raw = tokens[i] if i < len(tokens) else None
            i += 1
        if flag in (OLD_STRATEGY_FLAG, NEW_STRATEGY_FLAG):
            fields["mamba_strategy"] = _choice(flag, _value(flag, raw), {s: s for s in STRATEGIES})
            fields["strategy_flag"] = flag
        elif flag in _GRAPH_BACKEND_FLAGS:
            backend = _choice(flag, _value(flag, raw), {b: b for b in ("full", "breakable", "disabled")})
            fields[_GRAPH_BACKEND_FLAGS[flag]] = backend == "disabled"
        elif flag == "--mamba-ssm-dtype":
            fields["mamba_ssm_dtype"] = _choice(flag, _value(flag, raw), dict(_SSM_DTYPES))
        elif flag == "--kv-cache-dtype":
            fields["kv_cache_dtype"] = _choice(flag, _value(flag, raw), dict(_KV_DTYPES))
        elif flag == "--quantization":
            fields["weight_dtype"] = _choice(flag, _value(flag, raw), dict(_QUANT_DTYPES))
        elif flag in _INT_FLAGS:
            fields[_INT_FLAGS[flag]] = _as_int(flag, _value(flag, raw))
        elif flag in _FLOAT_FLAGS:
            fields[_FLOAT_FLAGS[flag]] = _as_float(flag, _value(flag, raw))
        elif flag in _STR_FLAGS:
            fields[_STR_FLAGS[flag]] = _value(flag, raw)
        else:
            # unknown flag: take the next word as its value unless it is another flag
            if raw is None and i < len(tokens) and not tokens[i].startswith("--") and "=" not in tokens[i]:
                raw = tokens[i]
                i += 1
            ignored.append(flag if raw is None else f"{flag} {raw}")
    parsed = EngineFlags(ignored=tuple(ignored), **fields)  # type: ignore[arg-type]
    _validate(parsed)
    return parsed


def _apply_env(name: str, raw: str, fields: dict[str, object]) -> None:
    if name == "SGLANG_MAMBA_SSM_DTYPE":
        fields["mamba_ssm_dtype"] = _choice(name, raw, dict(_SSM_DTYPES))
    elif name == "SGLANG_MAMBA_CONV_DTYPE":
        fields["mamba_conv_dtype"] = _choice(name, raw, dict(_SSM_DTYPES))
    else:
        fields["skip_decode_lock"] = raw.strip().lower() in ("1", "true", "yes", "on")


def _validate(f: EngineFlags) -> None:
    if f.mem_fraction_static is not None and not 0 < f.mem_fraction_static < 1:
        raise ConfigError(f"--mem-fraction-static must be between 0 and 1, got {f.mem_fraction_static}")
    if f.mamba_full_memory_ratio <= 0:
        raise ConfigError(f"--mamba-full-memory-ratio must be positive, got {f.mamba_full_memory_ratio}")
    for name in ("tp_size", "dp_size"):
        if getattr(f, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    if f.mamba_strategy == "extra_buffer_lazy" and f.disable_overlap_schedule:
        raise ConfigError(
            "extra_buffer_lazy requires the overlap scheduler: drop --disable-overlap-schedule "
            "or use --mamba-scheduler-strategy extra_buffer"
        )
    if f.enable_dp_attention:
        raise ConfigError(
            "--enable-dp-attention is not modeled by the planner (it changes the pool divisors); "
            "plan one attention-DP rank with --tp-size instead"
        )


def _strategy_spelling(f: EngineFlags, version: str | None) -> str:
    if version is None and f.strategy_flag is not None:
        return f.strategy_flag
    return strategy_flag_for(version)


def render_flags(f: EngineFlags, version: str | None = None) -> list[str]:
    """The SGLang flags that reproduce ``f`` (only what differs from SGLang's own defaults), spelled for a server
    of ``version``; without a version, the strategy keeps the spelling it was given in (else the newest)."""
    out: list[str] = []
    if f.tp_size != 1:
        out += ["--tp-size", str(f.tp_size)]
    if f.dp_size != 1:
        out += ["--dp-size", str(f.dp_size)]
    if f.weight_dtype is not None:
        out += ["--quantization", _QUANT_FLAG_VALUE.get(f.weight_dtype, f.weight_dtype)]
    if f.mem_fraction_static is not None:
        out += ["--mem-fraction-static", f"{f.mem_fraction_static:g}"]
    if f.mamba_strategy != "auto":
        out += [_strategy_spelling(f, version), f.mamba_strategy]
    if f.disable_radix_cache:
        out.append("--disable-radix-cache")
    if f.disable_overlap_schedule:
        out.append("--disable-overlap-schedule")
    if f.disable_cuda_graph:
        out.append("--disable-cuda-graph")
    if f.disable_prefill_graph:
        out.append("--disable-prefill-cuda-graph" if _has_new_names(version) else "--disable-piecewise-cuda-graph")
    if f.disable_decode_graph:
        out += ["--cuda-graph-backend-decode", "disabled"]
    if f.max_running_requests is not None:
        out += ["--max-running-requests", str(f.max_running_requests)]
    if f.max_mamba_cache_size is not None:
        out += ["--max-mamba-cache-size", str(f.max_mamba_cache_size)]
    if f.mamba_full_memory_ratio != DEFAULT_MAMBA_FULL_MEMORY_RATIO:
        out += ["--mamba-full-memory-ratio", f"{f.mamba_full_memory_ratio:g}"]
    if f.mamba_ssm_dtype is not None:
        out += ["--mamba-ssm-dtype", _SSM_FLAG_VALUE[f.mamba_ssm_dtype]]
    if f.kv_cache_dtype == "fp8":
        out += ["--kv-cache-dtype", "fp8_e4m3"]
    for flag, value in (
        ("--max-total-tokens", f.max_total_tokens),
        ("--page-size", f.page_size),
        ("--chunked-prefill-size", f.chunked_prefill_size),
        (graph_bs_flag_for(version), f.cuda_graph_max_bs),
        ("--context-length", f.context_length),
    ):
        if value is not None:
            out += [flag, str(value)]
    if f.mamba_track_interval != 256:
        out += ["--mamba-track-interval", str(f.mamba_track_interval)]
    return out


def render_env(f: EngineFlags) -> list[str]:
    """Environment assignments the flags imply (``VAR=value``), for the launch command's prefix."""
    env = []
    if f.mamba_conv_dtype != "bf16":
        env.append(f"SGLANG_MAMBA_CONV_DTYPE={_SSM_FLAG_VALUE[f.mamba_conv_dtype]}")
    if f.skip_decode_lock:
        env.append("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1")
    return env


def command_line(f: EngineFlags, version: str | None = None) -> str:
    """Environment prefix plus flags, shell-quoted, ready to append to ``python -m sglang.launch_server`` of a
    server of ``version`` (see :func:`render_flags`)."""
    return shlex.join([*render_env(f), *render_flags(f, version)])
