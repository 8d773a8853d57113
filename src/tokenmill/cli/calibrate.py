"""``tokenmill calibrate``: fit the planner's bandwidth efficiency (eta) to a live server or a log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.console import Console

from tokenmill.config import PlannerConfig
from tokenmill.errors import InputError
from tokenmill.monitor.samples import scrape_samples
from tokenmill.planner.calibrate import ThroughputSample, fit_eta, samples_from_log
from tokenmill.planner.capacity import server_capacity
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuCatalog


def _read_log(path: str) -> list[ThroughputSample]:
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fh:
            return samples_from_log(fh)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc


@click.command()
@click.option("--model", "-m", required=True, help="The served model: bundled name or config.json path")
@click.option("--gpu", "-g", required=True, help="The server's GPU (see `tokenmill plan --list-gpus`)")
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
@click.option("--gpu-file", type=click.Path(exists=True, dir_okay=False), help="YAML file with more GPUs")
@click.option("--json", "as_json", is_flag=True, help="Print JSON")
def calibrate(
    model: str,
    gpu: str,
    flags: tuple[str, ...],
    server: str | None,
    metrics_log: str | None,
    window_s: float | None,
    interval_s: float | None,
    max_samples: int | None,
    input_len: float | None,
    output_len: float | None,
    gpu_file: str | None,
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
    config = PlannerConfig()
    cap = server_capacity(model, GpuCatalog.load(gpu_file).get(gpu), parse_flags(list(flags)), config=config)
    if server is not None:
        samples = asyncio.run(
            scrape_samples(
                server,
                window_s=window_s if window_s is not None else config.calibrate_window_s,
                interval_s=interval_s or config.calibrate_interval_s,
                max_samples=max_samples,
            )
        )
    else:
        assert metrics_log is not None
        samples = _read_log(metrics_log)
    avg_context = None
    if input_len is not None and output_len is not None:
        avg_context = input_len + output_len / 2
    result = fit_eta(cap, samples, avg_context)
    if as_json:
        lo, hi = result.implied_range
        click.echo(
            json.dumps(
                {
                    "eta_bw": result.eta_bw,
                    "samples_used": result.used,
                    "samples_skipped": result.skipped,
                    "implied_min": lo,
                    "implied_max": hi,
                    "rms_log_error": result.rms_log_error,
                    "notes": list(result.notes),
                },
                indent=2,
            )
        )
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
    console.print(f"use it: tokenmill plan -m {model} -g {gpu} --eta {result.eta_bw:.3f}")
