"""``tokenmill sim``: run a simulated SGLang server until SIGTERM / Ctrl-C.

The options mirror :class:`~tokenmill.config.SimSpec` field by field (fault settings too; those whose
name clashes with a server field get a ``--fault-`` prefix, e.g. ``--fault-seed``). They default to
nothing: an option given on the command line overrides ``--config``, which overrides SimSpec.

With ``--gpu`` the server is the twin: SGLang launch flags go in ``--flags "..."`` or simply after the
options (``tokenmill sim --model qwen3.6-27b --gpu rtx-pro-6000 --mamba-radix-cache-strategy extra_buffer``);
words the command does not know are SGLang flags, and without ``--gpu`` they are an error.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import BaseModel, ValidationError

from tokenmill.cli.options import LocalPath, click_type
from tokenmill.config import FaultSpec, SimSpec, format_validation_error
from tokenmill.errors import ConfigError
from tokenmill.fsio import atomic_write

_NESTED = {"faults": FaultSpec}
_ENVVARS = {"api_key": "TOKENMILL_SIM_API_KEY"}
_ALIASES = {"engine_flags": ("--flags",)}  # SGLang's own word for them


@click.command(name="sim", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML file of SimSpec fields (command-line options override it).",
)
@click.option(
    "--port-file",
    type=LocalPath("the port file is a local file on this machine", dir_okay=False),
    help="Write the bound port here (atomically).",
)
def sim(ctx: click.Context, /, config_file: str | None, port_file: str | None, **given: Any) -> None:
    """Run a simulated SGLang server (OpenAI + /generate + /metrics) on 127.0.0.1.

    Prints one line, `tokenmill sim listening on http://HOST:PORT`, once it accepts connections;
    SGLang-style scheduler log lines go to stderr. Stops cleanly on SIGTERM or Ctrl-C.

    With --gpu it is the twin of an SGLang server: pools, admission, retraction and step times come from
    the capacity planner for --model (a bundled planner model or a config.json path) on that GPU with the
    SGLang flags given in --flags or after the options (see docs/planner.md, "The twin"). Without --gpu
    every request costs fixed step times.

    \b
    Examples:
        tokenmill sim --port 30000 --max-running-requests 64
        tokenmill sim --port 0 --port-file sim.port --time-scale 0.01 --error-rate 0.05
        tokenmill sim --model qwen3.6-27b --gpu rtx-pro-6000 --mamba-radix-cache-strategy extra_buffer
        tokenmill sim --model qwen3.6-27b --gpu rtx-pro-6000 --time-scale 0.01 \\
            --flags "--disable-radix-cache --max-running-requests 96 --mem-fraction-static 0.9"
    """
    cfg = build_config(config_file, given, ctx.args)
    asyncio.run(_serve(cfg, port_file))


def build_config(config_file: str | None, given: dict[str, Any], engine_args: Sequence[str] = ()) -> SimSpec:
    """SimSpec from an optional YAML file, the options given on the command line, and SGLang flags given
    as extra words (appended to ``engine_flags``; they need the twin, i.e. a ``gpu``)."""
    data: dict[str, Any] = {}
    if config_file:
        try:
            loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read sim config {config_file}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config_file} must hold a mapping of SimSpec fields (port, time_scale, ...)")
        data = loaded
    for key, value in given.items():
        if value is None:
            continue
        parent, _, name = key.partition("__")
        if name:
            section = data.setdefault(parent, {})
            if not isinstance(section, dict):
                raise ConfigError(f"{parent} in {config_file} must be a mapping of {parent} fields")
            section[name] = value
        else:
            data[key] = value
    if engine_args:
        data["engine_flags"] = " ".join(p for p in (str(data.get("engine_flags") or ""), shlex.join(engine_args)) if p)
    try:
        cfg = SimSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, config_file or "sim options")) from exc
    if cfg.gpu is None and engine_args:
        raise ConfigError(
            f"No such option '{engine_args[0]}' (in {shlex.join(engine_args)}): SGLang flags are read only by "
            "the twin; add --gpu (e.g. --gpu rtx-pro-6000) and a planner --model, or see `tokenmill sim --help`"
        )
    if cfg.gpu is None and cfg.engine_flags:
        raise ConfigError(
            f"SGLang flags without a twin: {cfg.engine_flags}; they are read only by the twin: add --gpu "
            "(e.g. --gpu rtx-pro-6000) and a planner --model, or see `tokenmill sim --help`"
        )
    return cfg


async def _serve(cfg: SimSpec, port_file: str | None) -> None:
    from tokenmill.sim.server import SimServer  # aiohttp is imported only when the command runs
    from tokenmill.sim.twin_report import startup_lines

    _log_to_stderr(cfg.log_level)
    server = SimServer(cfg)
    log = logging.getLogger("tokenmill.sim")
    if server.twin is not None:
        for line in startup_lines(server.twin):
            log.info("%s", line)
        if server.twin.unmodeled_flags:
            log.warning("SGLang flags the twin does not model: %s", " ".join(server.twin.unmodeled_flags))
    url = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if port_file:
            _write_atomically(Path(port_file), f"{server.port}\n")
        if server.twin is None:
            log.info(
                "max_total_num_tokens=%d, max_running_requests=%d, context_len=%d, time_scale=%g, instant=%s",
                server.engine.model.max_total_tokens,
                server.engine.model.max_running_requests,
                server.cfg.context_length,
                cfg.time_scale,
                cfg.instant,
            )
        else:
            log.info("time_scale=%g, instant=%s", cfg.time_scale, cfg.instant)
        click.echo(f"tokenmill sim listening on {url}")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await server.stop()


def _log_to_stderr(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s TP0] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    log = logging.getLogger("tokenmill.sim")
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False


def _write_atomically(path: Path, text: str) -> None:
    try:
        atomic_write(path, text.encode())
    except OSError as exc:
        raise ConfigError(f"cannot write the port file {path}: {exc}") from exc


# ---- options generated from the pydantic models (defaults stay in tokenmill.config) ---------------------------


def _options(model: type[BaseModel], section: str = "", taken: frozenset[str] = frozenset()) -> list[click.Option]:
    """One option per field; a nested section's fields clashing with ``taken`` get a ``--fault-`` style prefix."""
    opts = []
    for name, field in model.model_fields.items():
        ptype, is_flag = click_type(field.annotation)
        if ptype is None and not is_flag:
            continue
        flag = name.replace("_", "-")
        if name in taken:
            flag = f"{section.rstrip('s')}-{flag}"
        dest = f"{section}__{name}" if section else name
        default = field.get_default(call_default_factory=True)
        shown = "" if default is None or default == "" else f" [default: {default}]"
        help_text = f"{field.description or name.replace('_', ' ')}{shown}"
        decls = [*_ALIASES.get(name, ()), f"--{flag}/--no-{flag}" if is_flag else f"--{flag}", dest]
        opts.append(
            click.Option(decls, type=ptype, default=None, help=help_text, envvar=_ENVVARS.get(name), show_envvar=True)
        )
    return opts


def _all_options() -> list[click.Option]:
    own = frozenset(SimSpec.model_fields)
    opts = _options(SimSpec)
    for section, nested in _NESTED.items():
        opts += _options(nested, section, own)
    return opts


sim.params.extend(_all_options())
