"""``tokenmill sim``: run a simulated SGLang server until SIGTERM / Ctrl-C.

The options mirror :class:`~tokenmill.config.SimConfig` field by field (fault settings too; those whose
name clashes with a server field get a ``--fault-`` prefix, e.g. ``--fault-seed``). They default to
nothing: an option given on the command line overrides ``--config``, which overrides SimConfig.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import BaseModel, ValidationError

from tokenmill.config import FaultSpec, SimConfig, format_validation_error
from tokenmill.errors import ConfigError

_NESTED = {"faults": FaultSpec}
_ENVVARS = {"api_key": "TOKENMILL_SIM_API_KEY"}


@click.command(name="sim")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML file of SimConfig fields (command-line options override it).",
)
@click.option("--port-file", type=click.Path(dir_okay=False), help="Write the bound port here (atomically).")
def sim(config_file: str | None, port_file: str | None, **given: Any) -> None:
    """Run a simulated SGLang server (OpenAI + /generate + /metrics) on 127.0.0.1.

    Prints one line, `tokenmill sim listening on http://HOST:PORT`, once it accepts connections;
    SGLang-style scheduler log lines go to stderr. Stops cleanly on SIGTERM or Ctrl-C.

    \b
    Examples:
        tokenmill sim --port 30000 --max-running-requests 64
        tokenmill sim --port 0 --port-file sim.port --time-scale 0.01 --error-rate 0.05
    """
    cfg = build_config(config_file, given)
    asyncio.run(_serve(cfg, port_file))


def build_config(config_file: str | None, given: dict[str, Any]) -> SimConfig:
    """SimConfig from an optional YAML file plus the options given on the command line."""
    data: dict[str, Any] = {}
    if config_file:
        try:
            loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read sim config {config_file}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config_file} must hold a mapping of SimConfig fields (port, time_scale, ...)")
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
    try:
        return SimConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, config_file or "sim options")) from exc


async def _serve(cfg: SimConfig, port_file: str | None) -> None:
    from tokenmill.sim.server import SimServer  # aiohttp is imported only when the command runs

    _log_to_stderr(cfg.log_level)
    server = SimServer(cfg)
    url = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if port_file:
            _write_atomically(Path(port_file), f"{server.port}\n")
        logging.getLogger("tokenmill.sim").info(
            "max_total_num_tokens=%d, max_running_requests=%d, context_len=%d, time_scale=%g, instant=%s",
            server.engine.model.max_total_tokens,
            server.engine.model.max_running_requests,
            cfg.context_length,
            cfg.time_scale,
            cfg.instant,
        )
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
        fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write the port file {path}: {exc}") from exc


# ---- options generated from the pydantic models (defaults stay in config.py) ---------------------------


def _click_type(annotation: Any) -> tuple[click.ParamType[Any, Any] | None, bool]:
    """(click type, is_flag) for a field annotation; None type for fields the CLI does not offer."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return _click_type(args[0]) if len(args) == 1 else (None, False)
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(a) for a in args]), False
    simple: dict[Any, click.ParamType[Any, Any]] = {int: click.INT, float: click.FLOAT, str: click.STRING}
    if annotation is bool:
        return None, True
    return simple.get(annotation), False


def _options(model: type[BaseModel], section: str = "", taken: frozenset[str] = frozenset()) -> list[click.Option]:
    """One option per field; a nested section's fields clashing with ``taken`` get a ``--fault-`` style prefix."""
    opts = []
    for name, field in model.model_fields.items():
        ptype, is_flag = _click_type(field.annotation)
        if ptype is None and not is_flag:
            continue
        flag = name.replace("_", "-")
        if name in taken:
            flag = f"{section.rstrip('s')}-{flag}"
        dest = f"{section}__{name}" if section else name
        default = field.get_default(call_default_factory=True)
        shown = "" if default is None else f" [default: {default}]"
        help_text = f"{field.description or name.replace('_', ' ')}{shown}"
        decls = [f"--{flag}/--no-{flag}" if is_flag else f"--{flag}", dest]
        opts.append(
            click.Option(decls, type=ptype, default=None, help=help_text, envvar=_ENVVARS.get(name), show_envvar=True)
        )
    return opts


def _all_options() -> list[click.Option]:
    own = frozenset(SimConfig.model_fields)
    opts = _options(SimConfig)
    for section, nested in _NESTED.items():
        opts += _options(nested, section, own)
    return opts


sim.params.extend(_all_options())
