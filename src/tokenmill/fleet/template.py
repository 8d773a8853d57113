"""The engine command as a template: one rendering path for SGLang, vLLM and the simulated server.

A template is a shell-like string split with :mod:`shlex`; each word may hold placeholders
(``{python} {model} {host} {port} {tp} {gpus} {index}``), and the word ``{flags}`` becomes the profile's
flags, one ``--name value`` pair (or a bare ``--name``) each, followed by ``extra_args``. Rendering never
goes through a shell, so values with spaces stay one argument.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenmill.config import FlagValue, FleetEngine, FleetProfile
from tokenmill.errors import ConfigError

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


def render(profile: FleetProfile, slot: Slot, python: str | None = None) -> list[str]:
    """The argv of one server of ``profile`` at ``slot``."""
    template = profile.command or TEMPLATES[profile.engine]
    values = {
        "python": python or profile.python or sys.executable,
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
            argv += flag_args(profile.flags) + list(profile.extra_args)
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
        argv += flag_args(profile.flags) + list(profile.extra_args)
    return argv


def redact(argv: Sequence[str]) -> str:
    """The command line as one string for logs, with the values of secret-looking flags masked."""
    shown: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            shown.append("***")
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
