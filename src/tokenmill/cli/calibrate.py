"""``tokenmill calibrate``: fit the planner's bandwidth efficiency (eta) to a live server or a log."""

from __future__ import annotations

import json

import click
from rich.console import Console

from tokenmill.cli.options import json_option, planner_options
from tokenmill.config import PlannerSpec
from tokenmill.monitor.samples import collect_samples
from tokenmill.planner.calibrate import average_context, fit_eta
from tokenmill.planner.capacity import server_capacity
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuCatalog


@click.command()
@planner_options(
    required=True,
    model_help="The served model's planner model: a bundled name or a config.json path",
    gpu_help="The server's GPU (see `tokenmill plan --list-gpus`; one of --gpu-file too)",
)
@click.option("--flags", "flags", multiple=True, help="The server's SGLang launch flags (as for `plan`)")
@click.option("--server", help="Base URL of a running SGLang server started with --enable-metrics")
@click.option(
    "--metrics-log",
    type=click.Path(exists=True, dir_okay=False),
    help="SGLang scheduler log (Decode batch lines) or JSON lines with running/gen_throughput",
)
@click.option("--window", "window_s", type=click.FloatRange(min=0), help="Seconds to scrape --server")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.01), help="Seconds between scrapes")
@click.option("--samples", "max_samples", type=click.IntRange(min=1), help="Stop after this many distinct samples")
@click.option("--input-len", type=click.FloatRange(min=1), help="Mean prompt tokens (when the server omits lengths)")
@click.option("--output-len", type=click.FloatRange(min=1), help="Mean completion tokens (same)")
@json_option()
def calibrate(
    planner_model: str,
    gpu: str,
    gpu_file: str | None,
    flags: tuple[str, ...],
    server: str | None,
    metrics_log: str | None,
    window_s: float | None,
    interval_s: float | None,
    max_samples: int | None,
    input_len: float | None,
    output_len: float | None,
    as_json: bool,
) -> None:
    """Fit eta (achieved share of memory bandwidth) from measured decode throughput; use it as `plan --eta`.

    Reads sglang:num_running_reqs, sglang:gen_throughput and, when present, sglang:decode_sum_seq_lens,
    either live over a window (--server) or from a saved log (--metrics-log). Keep the server busy with
    a steady load while it is scraped.

    \b
    Example:
        tokenmill calibrate -m qwen3.6-27b -g rtx-pro-6000 --server http://10.0.0.5:30000 --window 120
    """
    if (server is None) == (metrics_log is None):
        raise click.UsageError("give exactly one of --server URL or --metrics-log FILE")
    config = PlannerSpec()
    card = GpuCatalog.load(gpu_file).get(gpu)
    cap = server_capacity(planner_model, card, parse_flags(list(flags)), config=config)
    samples = collect_samples(
        server, metrics_log, config, window_s=window_s, interval_s=interval_s, max_samples=max_samples
    )
    result = fit_eta(cap, samples, average_context(input_len, output_len))
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    console = Console()
    lo, hi = result.implied_range
    console.print(
        f"eta_bw = [bold]{result.eta_bw:.3f}[/] from {result.used} decode samples "
        f"({result.skipped} skipped); single samples imply {lo:.3f}-{hi:.3f}; "
        f"rms error {100 * result.rms_log_error:.1f}%"
    )
    for note in result.notes:
        console.print(f"note: {note}", style="dim")
    console.print(f"use it: tokenmill plan -m {planner_model} -g {gpu} --eta {result.eta_bw:.3f}")
