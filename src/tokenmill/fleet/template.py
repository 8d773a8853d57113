"""The engine command as a template: one rendering path for SGLang, vLLM and the simulated server.

A template is a shell-like string split with :mod:`shlex`; each word may hold placeholders
(``{python} {model} {host} {port} {tp} {gpus} {index}``), and the word ``{flags}`` becomes the profile's
flags, one ``--name value`` pair (or a bare ``--name``) each, followed by ``extra_args``. Rendering never
goes through a shell, so values with spaces stay one argument.

SGLang renamed some flags (``--mamba-scheduler-strategy`` became ``--mamba-radix-cache-strategy`` in 0.5.14,
and 0.5.20 refuses the old name): a profile may use either spelling, and the flags are written the way the
engine's release accepts (``sglang_version``, else the version installed for the engine's Python; the
simulated server takes the spelling of the SGLang release it imitates).
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tokenmill.config import MASKED, FlagValue, FleetEngine, FleetSpec, PlannerSpec
from tokenmill.errors import ConfigError
from tokenmill.planner.flags import (
    NEW_GRAPH_BS_FLAG,
    NEW_STRATEGY_FLAG,
    OLD_GRAPH_BS_FLAG,
    OLD_STRATEGY_FLAG,
    graph_bs_flag_for,
    strategy_flag_for,
)

TEMPLATES: Mapping[FleetEngine, str] = {
    "sglang": "{python} -m sglang.launch_server --model-path {model} --host {host} --port {port} "
    "--tp-size {tp} --enable-metrics {flags}",
    "vllm": "{python} -m vllm.entrypoints.openai.api_server --model {model} --host {host} --port {port} "
    "--tensor-parallel-size {tp} {flags}",
    "sim": "{python} -m tokenmill sim --host {host} --port {port} --model {model} {flags}",
}
PLACEHOLDERS = ("python", "model", "host", "port", "tp", "gpus", "index", "flags")
# Flag names whose values are secrets: shown as *** wherever a command line is logged.
_SECRET_WORDS = ("key", "token", "secret", "password")


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one server runs: its index in the fleet, its GPUs and its port."""

    index: int
    gpus: tuple[int, ...]
    host: str
    port: int


def flag_args(flags: Mapping[str, FlagValue]) -> list[str]:
    """``{"mem-fraction-static": 0.9, "enable-metrics": True, "x": None}`` → ``--mem-fraction-static 0.9
    --enable-metrics``; names may be given with or without the leading ``--``."""
    out: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        flag = name if name.startswith("-") else f"--{name}"
        out.append(flag)
        if value is not True:
            out.append(str(value))
    return out


def reasoning_args(profile: FleetSpec) -> list[str]:
    """``--reasoning-parser NAME`` for a profile with ``reasoning_parser`` (the same spelling in SGLang, vLLM and the
    simulated server), else nothing."""
    return ["--reasoning-parser", profile.reasoning_parser] if profile.reasoning_parser else []


# flags SGLang renamed: both spellings, and the one a release accepts
_RENAMED: tuple[tuple[frozenset[str], Callable[[str | None], str]], ...] = (
    (frozenset({OLD_STRATEGY_FLAG, NEW_STRATEGY_FLAG}), strategy_flag_for),
    (frozenset({OLD_GRAPH_BS_FLAG, NEW_GRAPH_BS_FLAG}), graph_bs_flag_for),
)
_VERSION_PROBE = "import importlib.metadata as m; print(m.version('sglang'))"


def respell(args: Sequence[str], version: str | None) -> list[str]:
    """``args`` with every renamed SGLang flag (``--flag value`` or ``--flag=value``) spelled for ``version``."""
    out: list[str] = []
    for word in args:
        name, eq, value = word.partition("=")
        for names, spelling in _RENAMED:
            if name in names:
                word = spelling(version) + eq + value
                break
        out.append(word)
    return out


@functools.lru_cache(maxsize=8)
def installed_sglang(python: str) -> str | None:
    """The SGLang version installed for ``python`` (its package metadata); ``None`` when it cannot be read."""
    try:
        done = subprocess.run(
            [python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60, check=False, env=os.environ
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def engine_version(profile: FleetSpec, python: str) -> str | None:
    """The SGLang release whose flag spellings the servers of ``profile`` accept (``None``: the newest)."""
    if profile.sglang_version:
        return profile.sglang_version
    if profile.engine == "sim":
        return PlannerSpec().sglang_version
    if profile.engine == "sglang":
        return installed_sglang(python)
    return None


def render(profile: FleetSpec, slot: Slot, python: str | None = None) -> list[str]:
    """The argv of one server of ``profile`` at ``slot``."""
    template = profile.command or TEMPLATES[profile.engine]
    interpreter = python or profile.python or sys.executable
    flags = flag_args(profile.flags) + reasoning_args(profile) + list(profile.extra_args)
    if profile.engine != "vllm":
        flags = respell(flags, engine_version(profile, interpreter))
    values = {
        "python": interpreter,
        "model": profile.model,
        "host": slot.host,
        "port": str(slot.port),
        "tp": str(profile.tp_size),
        "gpus": ",".join(map(str, slot.gpus)),
        "index": str(slot.index),
    }
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ConfigError(f"the command template cannot be split into words ({exc}): {template!r}") from exc
    argv: list[str] = []
    flags_seen = False
    for word in words:
        if word == "{flags}":
            argv += flags
            flags_seen = True
            continue
        try:
            argv.append(word.format(**values))
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"the command template word {word!r} cannot be filled ({exc!r}); placeholders are "
                + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            ) from exc
    if not flags_seen:
        argv += flags
    return argv


def redact(argv: Sequence[str]) -> str:
    """The command line as one string for logs, with the values of secret-looking flags masked."""
    shown: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            shown.append(MASKED)
            hide_next = False
            continue
        name, eq, _ = word.partition("=")
        secret = word.startswith("-") and any(w in name.lower() for w in _SECRET_WORDS)
        if secret and eq:
            shown.append(f"{name}=***")
            continue
        hide_next = secret
        shown.append(shlex.quote(word))
    return " ".join(shown)
