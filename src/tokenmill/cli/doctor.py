"""``tokenmill doctor``: what limits the servers' throughput, with the evidence and the flags to change."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import click

from tokenmill.config import DoctorSpec, normalize_url
from tokenmill.errors import ConfigError


def _table(servers: list[object]) -> str:
    from tokenmill.doctor.model import ServerObs
    from tokenmill.fmt import num, pct

    lines = ["server                          running    queue   KV     state  decode tok/s  prompt tok/s  health"]
    for s in servers:
        assert isinstance(s, ServerObs)
        v = s.view
        run = f"{num(v.running)}/{v.max_running or '?'}"
        health = "up" if v.healthy else f"down: {v.error}"
        lines.append(
            f"{v.url:<31} {run:>9} {num(v.queued):>8} {pct(v.kv_usage):>6} {pct(v.state_usage):>6} "
            f"{num(v.decode_tok_s):>13} {num(v.prompt_tok_s):>13}  {health}"
        )
    return "\n".join(lines)


def _vs_hardware(obs: Any, predictor: Any, compare: Any) -> list[dict[str, Any]]:
    """Each healthy server's decode rate against the planner's expected rate, the roofline's ceiling and, with
    --compare-gpu, the same workload planned on that GPU (all on the GPU's clock: a twin's time scale taken out)."""
    rows: list[dict[str, Any]] = []
    for server in obs.servers:
        v = server.view
        exp = predictor.expected(server, obs.client) if v.healthy and v.decode_tok_s else None
        if exp is None:
            continue
        scale = v.info.time_scale if v.info is not None and v.info.time_scale else 1.0
        measured = v.decode_tok_s * scale
        row = {
            "server": v.url,
            "gpu": exp.gpu,
            "decode_tok_s": round(measured, 1),
            "expected_tok_s": round(exp.tok_s, 1),
            "expected_share": round(measured / exp.tok_s, 4) if exp.tok_s else None,
            "ceiling_tok_s": round(exp.ceiling_tok_s, 1),
            "ceiling_share": round(measured / exp.ceiling_tok_s, 4) if exp.ceiling_tok_s else None,
        }
        other = compare.expected(server, obs.client) if compare is not None else None
        if other is not None and other.tok_s:
            row.update(
                compare_gpu=other.gpu,
                compare_tok_s=round(other.tok_s, 1),
                compare_share=round(measured / other.tok_s, 4),
            )
        rows.append(row)
    return rows


def _vs_hardware_text(rows: list[dict[str, Any]]) -> str:
    from tokenmill.fmt import num

    lines = []
    for r in rows:
        line = (
            f"{r['server']}: decodes {num(r['decode_tok_s'])} tok/s (GPU clock), {r['expected_share'] * 100:.0f}% of "
            f"the planner's {num(r['expected_tok_s'])} on {r['gpu']}, {r['ceiling_share'] * 100:.0f}% of the "
            f"roofline's {num(r['ceiling_tok_s'])}"
        )
        if "compare_gpu" in r:
            line += f", {r['compare_share'] * 100:.0f}% of the {num(r['compare_tok_s'])} planned on {r['compare_gpu']}"
        lines.append(line)
    return "\n".join(lines)


def _rules_text() -> str:
    from tokenmill.doctor.rules import RULES

    return "\n".join(f"{r.id:<24} binds {r.binds:<20} when {r.when}" for r in RULES)


@click.command()
@click.option("--servers", "-s", multiple=True, help="Server base URL (repeat).")
@click.option("--servers-file", type=click.Path(exists=True, dir_okay=False), help="One base URL per line.")
@click.option("--model", "-m", help="Model for predicted gains (bundled name or config.json; default: the servers').")
@click.option("--gpu", "-g", help="GPU of the servers for predicted gains (e.g. h100, rtx-pro-6000).")
@click.option(
    "--compare-gpu",
    help="Also plan the servers' flags and workload on this GPU (e.g. b200) and show their share of it.",
)
@click.option("--concurrency", type=click.IntRange(min=1), help="The client's in-flight limit per server, if known.")
@click.option(
    "--output",
    "-o",
    "out",
    type=click.Path(exists=True, file_okay=False),
    help="Output directory of a run in progress: read the client's side (in flight, limits, CPU) from it.",
)
@click.option(
    "--samples", type=click.IntRange(min=2), help="Least scrapes per server (default 4; more until the rates settle)."
)
@click.option("--interval", type=click.FloatRange(min=0.1), help="Seconds between scrapes (default 2).")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0.1),
    help="Sample until the rates settle, at most this long (default 60).",
)
@click.option("--api-key-env", help="Env var holding the servers' API key (for /server_info).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.option("--rules", "list_rules", is_flag=True, help="List the rules and exit.")
def doctor(
    servers: tuple[str, ...],
    servers_file: str | None,
    model: str | None,
    gpu: str | None,
    compare_gpu: str | None,
    concurrency: int | None,
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

    Each verdict shows its numbers and the exact flags to change; with the model and GPU known (--model,
    --gpu, or a twin that says), the planner predicts max running and tok/s before and after, and the
    verdicts are ranked by the predicted gain of their best change (the headline is the highest).

    \b
    Examples:
        tokenmill doctor --servers http://10.0.0.5:30000 --gpu h100
        tokenmill doctor --servers-file servers.txt --output run-out/    # with the running job's side
    """
    if list_rules:
        click.echo(_rules_text())
        return
    urls = [normalize_url(u) for u in servers]
    if servers_file:
        from tokenmill.config.servers import parse_servers

        urls += [ep.url for ep in parse_servers(Path(servers_file).read_text())]  # a server marked down shows as one
    urls = list(dict.fromkeys(urls))
    if not urls:
        raise click.UsageError("give --servers URL (repeatable) or --servers-file")
    headers = {}
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ConfigError(f"--api-key-env names {api_key_env!r}, but that variable is not set; export it")
        headers["Authorization"] = f"Bearer {key}"
    spec = DoctorSpec()
    spec = spec.model_copy(
        update={
            "down_after_s": 0.0,  # one look: a server that never answered is down
            "oneshot_samples": samples or spec.oneshot_samples,
            "oneshot_interval_s": interval or spec.oneshot_interval_s,
            "oneshot_max_s": max_seconds or spec.oneshot_max_s,
        }
    )
    from tokenmill.doctor import PlannerPredictor, diagnose, format_verdicts
    from tokenmill.doctor.oneshot import observe

    for name in (gpu, compare_gpu):  # a misspelt name would only mean silently missing predictions: say so now
        if name:
            from tokenmill.planner.hardware import GpuCatalog

            GpuCatalog.load().get(name)
    if model:
        from tokenmill.planner.catalog import load_model

        load_model(model)

    obs, settling = asyncio.run(
        observe(urls, spec, headers=headers, concurrency=concurrency, out=Path(out) if out else None)
    )
    predictor = PlannerPredictor(model, gpu)
    verdicts = diagnose(obs, spec, predictor)
    hardware = _vs_hardware(obs, predictor, PlannerPredictor(model, compare_gpu) if compare_gpu else None)
    if as_json:
        sampling = {"text": settling.text(), "settled": settling.settled(), "spread": settling.spread()}
        body = {"sampling": sampling, "verdicts": [v.as_dict() for v in verdicts], "vs_hardware": hardware}
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(_table(list(obs.servers)))
    click.echo(settling.text())
    if hardware:
        click.echo(_vs_hardware_text(hardware))
    click.echo("")
    click.echo(format_verdicts(verdicts, len(urls)))
