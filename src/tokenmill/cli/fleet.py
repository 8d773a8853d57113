"""``tokenmill fleet up | down | status | apply | tune``: servers started from a profile, kept up, re-flagged, tuned."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click
import orjson

from tokenmill.cli.options import fleet_file_option
from tokenmill.errors import ServerError

STATE_DIR_HELP = "The fleet's state directory (default: the profile's state_dir)."


def fleet_run_options(fn: Any) -> Any:
    """``run``'s options for a fleet of its own and for partitioned runs."""
    options = [
        fleet_file_option(
            "Start the servers of this fleet profile first, follow them during the run, stop them after."
        ),
        click.option(
            "--ray-address",
            help="Ray cluster (host:port, auto, or local for a one-machine cluster): the fleet's servers become "
            "Ray actors, and --partitions clients Ray tasks.",
        ),
        click.option(
            "--partitions",
            type=int,
            help="Split the input in N disjoint parts, each run by its own client (a Ray task).",
        ),
        click.option(
            "--autotune",
            is_flag=True,
            help="With --fleet: apply the doctor's best change to one server, measure it, and roll it to the rest "
            "or back (the profile's autotune section says what it may change).",
        ),
        click.option(
            "--autotune-dry-run",
            is_flag=True,
            help="Like --autotune, but only say what it would change.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _state_dir(profile_file: str | None, state_dir: str | None) -> Path:
    if state_dir:
        return Path(state_dir).absolute()
    if profile_file:
        from tokenmill.config import load_profile

        return Path(load_profile(profile_file).state_dir).absolute()
    from tokenmill.config import FleetSpec

    return Path(FleetSpec.model_fields["state_dir"].default).absolute()


@click.group()
def fleet() -> None:
    """Start, watch, re-flag and stop a fleet of inference servers described by a profile (YAML).

    \b
    A profile, e.g. fleet.yaml:
        engine: sglang            # sglang, vllm or sim
        model: Qwen/Qwen3-8B
        gpus: 8                   # or a list of ids; one server per tp_size GPUs
        tp_size: 1
        base_port: 30000          # server i listens on base_port + i (0: free ports)
        flags: {mem-fraction-static: 0.88, mamba-radix-cache-strategy: no_buffer, disable-overlap-schedule: true}

    Point a job's servers_file at STATE_DIR/endpoints.txt (or use `tokenmill run JOB --fleet fleet.yaml`).
    """


@fleet.command()
@click.argument("profile_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--detach", "-d", is_flag=True, help="Return once the fleet is healthy; it keeps running.")
@click.option("--ray-address", help="Place the servers as Ray actors on this cluster (host:port, auto, local).")
@click.option("--log-level", default="INFO", show_default=True)
def up(profile_file: str, state_dir: str | None, detach: bool, ray_address: str | None, log_level: str) -> None:
    """Start the servers of PROFILE_FILE, wait until all are healthy, then keep them up.

    Crashed servers are restarted (with backoff, a bounded number of times in a row). In the foreground
    (the default) Ctrl-C or `tokenmill fleet down` stops every server; with --detach the fleet runs on
    in the background.
    """
    from tokenmill.autotune.tuned import newer_tuned
    from tokenmill.config import load_profile
    from tokenmill.logs import setup_logging

    profile = load_profile(profile_file)
    where = _state_dir(profile_file, state_dir)
    tuned = newer_tuned(profile_file)
    if tuned is not None:
        click.echo(
            f"note: {tuned} holds the flags autotune kept for this profile; "
            f"start with them by `tokenmill fleet up {tuned}`",
            err=True,
        )
    if detach:
        from tokenmill.fleet.daemon import start_detached

        ready = start_detached(
            profile_file, where, profile.start_timeout_s, ray_address=ray_address, log_level=log_level
        )
        click.echo(f"fleet ready (supervisor pid {ready.pid}); endpoints in {ready.endpoints_file}")
        return
    setup_logging(log_level)
    from tokenmill.run.with_fleet import start_fleet

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    fleet_ = start_fleet(profile, ray_address, where)
    try:
        click.echo(f"fleet ready: {len(fleet_.handles)} servers; endpoints in {fleet_.endpoints_path}", err=True)
        click.echo("stop it with Ctrl-C or `tokenmill fleet down`", err=True)
        while not stop.wait(0.5):
            pass
    finally:
        click.echo("stopping the fleet ...", err=True)
        fleet_.down()


@fleet.command()
@click.argument("profile_file", required=False, type=click.Path(dir_okay=False))
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for the servers to stop.")
def down(profile_file: str | None, state_dir: str | None, timeout: float) -> None:
    """Stop the fleet of PROFILE_FILE (or of --state-dir): every server, then its supervisor."""
    from tokenmill.fleet.daemon import stop

    where = _state_dir(profile_file, state_dir)
    stopped = stop(where, timeout)
    n = stopped.leftovers
    note = f"; killed {n} server process(es) left by a supervisor that died" if n else ""
    click.echo(f"fleet of {where} stopped{note}")


@fleet.command()
@click.argument("profile_file", required=False, type=click.Path(dir_okay=False))
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(profile_file: str | None, state_dir: str | None, as_json: bool) -> None:
    """Show each server of the fleet: URL, GPUs, state, restarts, pid, flags. Exits 1 unless all are up."""
    from tokenmill.fleet.state import load_state, pid_alive

    where = _state_dir(profile_file, state_dir)
    state = load_state(where)
    alive = pid_alive(state.supervisor_pid)
    all_up = alive and bool(state.servers) and all(s.state == "up" for s in state.servers)
    if as_json:
        doc = {**state.to_json(), "supervisor_alive": alive}
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        sys.exit(0 if all_up else 1)
    profile = state.profile
    who = "running" if alive else "not running"
    click.echo(f"fleet {where}: {state.status} (supervisor pid {state.supervisor_pid}, {who})")
    click.echo(f"  engine {profile.get('engine')}, model {profile.get('model')}, endpoints {state.endpoints_file}")
    for s in state.servers:
        gpus = ",".join(map(str, s.gpus)) or "-"
        click.echo(f"  [{s.index}] {s.url:<28} gpus {gpus:<8} {s.state:<9} restarts {s.restarts}  pid {s.pid or '-'}")
        if s.error and s.state != "up":
            click.echo("      " + s.error.splitlines()[0])
    flags = profile.get("flags") or {}
    click.echo("  flags: " + (" ".join(f"{k}={v}" for k, v in flags.items()) or "(none)"))
    if state.apply is not None:
        click.echo(f"  last re-flag {state.apply.id}: {state.apply.state}")
    sys.exit(0 if all_up else 1)


@fleet.command()
@click.argument("profile_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until every server is re-flagged.")
def apply(profile_file: str, state_dir: str | None, wait: bool) -> None:
    """Re-flag the running fleet with PROFILE_FILE, one server at a time, while runs go on.

    Each server in turn is drained (runs send it nothing new and its requests finish), restarted with the
    new flags and taken back once healthy. Only what a server runs may change (engine, model, flags,
    extra_args, command, python, env); GPUs, ports and layout need `fleet down` and `fleet up`.
    """
    from tokenmill.config import FleetSpec, load_profile
    from tokenmill.fleet.daemon import wait_apply
    from tokenmill.fleet.state import load_state, request_apply
    from tokenmill.fleet.supervisor import check_reflag

    profile = load_profile(profile_file)
    where = _state_dir(None, state_dir) if state_dir else Path(profile.state_dir).absolute()
    current = load_state(where)
    changed = check_reflag(FleetSpec.model_validate(current.profile), profile)
    if not changed:
        click.echo("nothing to apply: the fleet already runs this profile's command")
        return
    request_id = request_apply(where, profile)
    click.echo(f"re-flag {request_id} requested ({', '.join(changed)} changed)")
    if not wait:
        return
    try:
        wait_apply(where, request_id, lambda line: click.echo(f"  {line}"))
    except ServerError as exc:
        raise ServerError(f"{exc}; `tokenmill fleet status` shows the fleet") from None
    click.echo("re-flag done: every server runs the new flags")


@fleet.command()
@click.argument("profile_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--dry-run", is_flag=True, help="Say what would be changed, and change nothing.")
@click.option("--changes", type=click.IntRange(min=1), help="Changes to try before stopping (autotune.max_changes).")
@click.option(
    "--output",
    "-o",
    "out",
    type=click.Path(exists=True, file_okay=False),
    help="Output directory of a run using the fleet: the client's side (in flight, limits, ETA) is read from it.",
)
@click.option("--model", "-m", help="Model for the planner's predictions (default: the servers' own).")
@click.option("--gpu", "-g", help="GPU of the servers for the planner's predictions (a twin says its own).")
@click.option("--gpu-file", type=click.Path(exists=True, dir_okay=False), help="YAML file of GPUs beyond the bundled.")
@click.option("--log-level", default="INFO", show_default=True)
def tune(
    profile_file: str,
    state_dir: str | None,
    dry_run: bool,
    changes: int | None,
    out: str | None,
    model: str | None,
    gpu: str | None,
    gpu_file: str | None,
    log_level: str,
) -> None:
    """Tune a running fleet: apply the doctor's best change to one server, measure it, keep it or roll it back.

    The doctor's confirmed headline, when the planner predicts its change to gain at least
    autotune.min_predicted_gain and the profile's autotune.allow names its flags, is applied to one server
    (a canary) through the rolling re-flag; its decode rate is measured against its own before and the
    other servers' meanwhile; then the change is rolled to the rest, or the canary rolled back. One change
    at a time, at most autotune.max_changes. Every step is printed and written to STATE_DIR/autotune.jsonl.

    \b
    Examples:
        tokenmill fleet tune fleet.yaml --dry-run --changes 1
        tokenmill fleet tune fleet.yaml --output run-out/ --gpu h100
    """
    import asyncio

    from tokenmill.autotune.standalone import AUTOTUNE_LOG
    from tokenmill.autotune.standalone import tune as tune_fleet
    from tokenmill.config import MonitorSpec, load_profile
    from tokenmill.logs import setup_logging

    setup_logging(log_level)
    profile = load_profile(profile_file)
    where = _state_dir(profile_file, state_dir)
    spec = profile.autotune.model_copy(
        update={"dry_run": dry_run or profile.autotune.dry_run, "max_changes": changes or profile.autotune.max_changes}
    )
    if gpu:  # a misspelt name would only mean silently missing predictions: say so now
        from tokenmill.planner.hardware import GpuCatalog

        GpuCatalog.load(gpu_file).get(gpu)
    monitor = MonitorSpec(gpu=gpu, planner_model=model, gpu_file=gpu_file)
    click.echo(f"tuning the fleet of {where}: it may change {', '.join(spec.allow) or 'nothing'}", err=True)
    try:
        done = asyncio.run(tune_fleet(where, spec, monitor, Path(out) if out else None))
    except KeyboardInterrupt:
        click.echo("stopped; the fleet runs one profile", err=True)
        sys.exit(3)
    for change in done:
        measured = "" if change.measured is None else f", measured {change.measured.gain:+.0%}"
        click.echo(f"{change.change}: {change.outcome} (predicted {change.predicted_gain:+.0%}{measured})")
    if not done:
        click.echo("no change was tried")
    if any(c.outcome == "kept" for c in done):
        from tokenmill.fleet.state import load_state
        from tokenmill.run.with_fleet import write_kept

        flags = load_state(where).profile.get("flags")
        write_kept(profile_file, flags if isinstance(flags, dict) else profile.flags, done)
    click.echo(f"every step is in {where / AUTOTUNE_LOG}", err=True)
