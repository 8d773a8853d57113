"""``tokenmill doctor``: what limits the servers' throughput, with the evidence and the flags to change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tokenmill.cli.options import (
    fleet_file_option,
    json_option,
    output_option,
    planner_options,
    request_kind_options,
    server_options,
)
from tokenmill.config import DoctorSpec, normalize_url
from tokenmill.config.servers import read_servers
from tokenmill.errors import ConfigError

if TYPE_CHECKING:
    from tokenmill.doctor.checkup import Checkup

_DEFAULTS = {name: field.default for name, field in DoctorSpec.model_fields.items()}  # shown in the help


def _urls(servers: tuple[str, ...], servers_file: str | None) -> list[str]:
    urls = [normalize_url(u) for u in servers]
    if servers_file:  # a server marked down shows as one
        urls += [ep.url for ep in read_servers(servers_file, "--servers-file")]
    urls = list(dict.fromkeys(urls))
    if not urls:
        raise click.UsageError("give --servers URL (repeatable) or --servers-file")
    return urls


def _from_fleet(
    path: str, planner_model: str | None, gpu: str | None, have_servers: object
) -> tuple[str | None, str | None, str | None]:
    """The planner's model and GPU the options leave open, from the fleet profile; its endpoints file when no
    servers are given."""
    from tokenmill.config import load_profile
    from tokenmill.fleet.planned import read_fleet
    from tokenmill.fleet.state import load_state

    fleet = read_fleet(path)
    endpoints = None
    if not have_servers:
        endpoints = load_state(Path(load_profile(path).state_dir)).endpoints_file or None
        if endpoints is None:
            raise ConfigError(f"--fleet {path}: the fleet is not up (no endpoints file): give --servers, or fleet up")
    return planner_model or fleet.model, gpu or fleet.gpu, endpoints


@click.command()
@server_options
@planner_options(
    model_help="The planner's model for predicted gains: a bundled name or a config.json (default: the servers').",
    gpu_help="GPU of the servers for predicted gains (e.g. h100, rtx-pro-6000; one of --gpu-file too).",
)
@click.option(
    "--compare-gpu",
    help="Also plan the servers' flags and workload on this GPU (e.g. b200) and show their share of it.",
)
@fleet_file_option(
    "The fleet profile the servers were started from: the planner's model and a twin's GPU from it (--planner-model "
    "and --gpu win), and its servers when none are given."
)
@click.option("--concurrency", type=click.IntRange(min=1), help="The client's in-flight limit per server, if known.")
@request_kind_options(
    "The requests' output limit (sampling.max_tokens; default: the run's with --output), for the predictions",
    "The requests are sent with ignore_eos (sampling.extra_body.ignore_eos: true): the predictions plan them as "
    "SGLang admits them, every answer running to --max-tokens",
)
@click.option(
    "--train-max-length",
    type=click.IntRange(min=1),
    help="The drafter trainer's maximum sequence length (prompt + answer): a KV-bound server is told the max_tokens "
    "that fits it (what is longer is cut at training anyway)",
)
@output_option(
    "Output directory of a run in progress: read the client's side (in flight, limits, CPU) from it.", exists=True
)
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    help=f"Least scrapes per server (default {_DEFAULTS['oneshot_samples']}; more until the rates settle).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    help=f"Seconds between scrapes (default {_DEFAULTS['oneshot_interval_s']:g}).",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0.1),
    help=f"Sample until the rates settle, at most this long (default {_DEFAULTS['oneshot_max_s']:g}).",
)
@click.option("--api-key-env", help="Env var holding the servers' API key (for /server_info).")
@json_option("Print the verdicts as JSON.")
@click.option("--rules", "list_rules", is_flag=True, help="List the rules and exit.")
def doctor(
    servers: tuple[str, ...],
    servers_file: str | None,
    planner_model: str | None,
    gpu: str | None,
    gpu_file: str | None,
    compare_gpu: str | None,
    fleet_file: str | None,
    concurrency: int | None,
    max_tokens: int | None,
    ignore_eos: bool | None,
    train_max_length: int | None,
    out: str | None,
    samples: int | None,
    interval: float | None,
    max_seconds: float | None,
    api_key_env: str | None,
    as_json: bool,
    list_rules: bool,
) -> None:
    """Scrape the servers until their rates settle and say what binds their throughput: the state pool, the KV
    cache, the running cap, the client's concurrency, compute, prefill, retractions, a down or flapping server,
    or the client CPU.

    Each verdict shows its numbers and the exact flags to change; with the model and GPU known (--planner-model,
    --gpu, or a twin that says), the planner predicts max running and tok/s before and after, and the
    verdicts are ranked by the predicted gain of their best change (the headline is the highest).

    \b
    Examples:
        tokenmill doctor --servers http://10.0.0.5:30000 --gpu h100
        tokenmill doctor --servers-file servers.txt --output run-out/    # with the running job's side
    """
    from tokenmill.doctor.checkup import Planning, checkup, oneshot_spec
    from tokenmill.doctor.render import rules_text
    from tokenmill.run.access import auth_headers, read_api_key

    if list_rules:
        click.echo(rules_text())
        return
    if fleet_file:
        planner_model, gpu, servers_file = _from_fleet(fleet_file, planner_model, gpu, servers or servers_file)
    urls = _urls(servers, servers_file)
    headers = auth_headers(read_api_key(api_key_env, "--api-key-env"))
    found = asyncio.run(
        checkup(
            urls,
            oneshot_spec(samples, interval, max_seconds),
            Planning(planner_model, gpu, compare_gpu, gpu_file, max_tokens, ignore_eos, train_max_length),
            headers=headers,
            concurrency=concurrency,
            out=Path(out) if out else None,
        )
    )
    if as_json:
        click.echo(json.dumps(found.as_dict(), indent=2))
        return
    _show(found, len(urls))


def _show(found: Checkup, servers: int) -> None:
    """The checkup as text: the servers, how the rates settled, the decode rate against the hardware, the verdicts."""
    from tokenmill.doctor.render import format_verdicts, hardware_text, servers_table

    click.echo(servers_table(found.obs.servers))
    click.echo(found.settling.text())
    if found.vs_hardware:
        click.echo(hardware_text(found.vs_hardware))
    click.echo("")
    click.echo(format_verdicts(found.verdicts, servers))
