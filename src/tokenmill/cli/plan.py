"""``tokenmill plan``: capacity and throughput of SGLang servers for a model, GPU, flags and workload."""

from __future__ import annotations

import json
from dataclasses import dataclass

import click
from rich import box
from rich.console import Console
from rich.table import Table

from tokenmill.cli.options import (
    fleet_file_option,
    job_file_option,
    json_option,
    planner_options,
    request_kind_options,
)
from tokenmill.fleet.planned import FleetServers, read_fleet
from tokenmill.planner.catalog import bundled_models
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuCatalog, GpuSpec
from tokenmill.planner.models import kv_bytes_per_token, param_counts, state_bytes_per_slot
from tokenmill.planner.question import PlanAnswer, PlanQuestion, WorkloadQuestion, answer
from tokenmill.planner.render import render_plan, what_if_table
from tokenmill.planner.report_json import report_dict, what_if_dicts
from tokenmill.planner.run_files import JobRequests, read_job


def _list_models(console: Console) -> None:
    t = Table(
        title="Bundled models (names are case-insensitive; or pass a path to a config.json)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    t.add_column("name", no_wrap=True)
    t.add_column("params (active)", no_wrap=True)
    t.add_column("attn/lin", no_wrap=True)
    t.add_column("KV B/tok", justify="right", no_wrap=True)
    t.add_column("MiB/slot", justify="right", no_wrap=True)
    for m in bundled_models():
        p = param_counts(m)
        slot = state_bytes_per_slot(m) / (1 << 20)
        t.add_row(
            m.name,
            f"{p.total / 1e9:.1f}B" + (f" ({p.active / 1e9:.1f}B)" if m.is_moe else ""),
            f"{m.attention.layers}/{m.recurrent.layers if m.recurrent else 0}",
            f"{kv_bytes_per_token(m):,}",
            f"{slot:.2f}" if slot else "-",
        )
    console.print(t)


def _list_gpus(console: Console, catalog: GpuCatalog) -> None:
    t = Table(
        title="GPUs (add your own with --gpu-file)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        caption="? = unverified (see the sources in gpus.yaml)",
    )
    t.add_column("key", no_wrap=True)
    for col in ("GiB", "GB/s", "BF16 TF", "FP8 TF", "FP4 TF"):
        t.add_column(col, justify="right", no_wrap=True)
    for g in catalog:

        def mark(value: float | None, field: str, fmt: str = "{:g}", gpu: GpuSpec = g) -> str:
            if value is None:
                return "-"
            return fmt.format(value) + ("?" if gpu.is_unverified(field) else "")

        t.add_row(
            g.key,
            mark(g.memory_gib, "memory_mib", "{:.1f}"),
            mark(g.bandwidth_gbs, "bandwidth_gbs", "{:,.0f}"),
            mark(g.bf16_tflops, "bf16_tflops"),
            mark(g.fp8_tflops, "fp8_tflops"),
            mark(g.fp4_tflops, "fp4_tflops"),
        )
    console.print(t)


@click.command()
@planner_options()
@click.option("--gpus", "gpu_count", type=click.IntRange(min=1), help="GPUs in the fleet [default: --fleet's, else 1]")
@click.option(
    "--flags",
    "flags",
    multiple=True,
    help='SGLang launch flags as you would type them, e.g. "--mamba-radix-cache-strategy extra_buffer '
    '--mem-fraction-static 0.9" (repeatable; SGLANG_MAMBA_SSM_DTYPE=... style assignments too)',
)
@click.option("--prompts", type=click.IntRange(min=1), help="Number of prompts to generate for")
@click.option("--input-len", type=click.FloatRange(min=1), help="Mean prompt tokens")
@click.option("--output-len", type=click.FloatRange(min=1), help="Mean completion tokens")
@request_kind_options(
    "The requests' output limit (sampling.max_tokens) [default: --job's, else the mean output]",
    "The requests are sent with ignore_eos (sampling.extra_body.ignore_eos: true): every answer runs to "
    "--max-tokens, and SGLang admits a request only when its whole answer fits [default: --job's]",
)
@job_file_option(
    "Plan this job's requests: its sampling.max_tokens, whether it sends ignore_eos, its input's prompt lengths "
    "and count (a local input), monitor.planner_model and monitor.gpu (the options given override them)"
)
@fleet_file_option(
    "Plan this fleet profile's servers: their flags, GPU count and SGLang release (a twin's GPU and eta too), "
    "and its model when the planner knows it (--flags adds to its flags; the options given override the rest)"
)
@click.option("--dataset", help="Measure prompt lengths (and count prompts) from this jsonl/json/parquet input")
@click.option("--tokenizer", help="Tokenizer directory for --dataset (otherwise 4 chars/token is assumed)")
@click.option("--sample", "sample_rows", type=click.IntRange(min=1), help="Rows of --dataset to measure")
@click.option(
    "--eta", type=click.FloatRange(min=0.01, max=1.0), help="Bandwidth efficiency (from `tokenmill calibrate`)"
)
@click.option("--compare", "compare_gpus", multiple=True, help="Also plan on this GPU and show the ratio (repeatable)")
@click.option(
    "--sglang-version",
    help="The SGLang release the servers run (e.g. 0.5.10): sizing rules and flag spellings follow it "
    "[default: PlannerSpec.sglang_version]",
)
@click.option(
    "--train-max-length",
    type=click.IntRange(min=1),
    help="A trainer's maximum sequence length: the share of records and of tokens (prompt + answer) it would cut",
)
@click.option(
    "--output-sigma",
    type=click.FloatRange(min=0.01),
    help="Log-normal sigma of the output lengths for --train-max-length [default: PlannerSpec.workload_output_sigma]",
)
@click.option("--what-if/--no-what-if", "with_what_if", default=True, help="Rank alternative configurations")
@json_option("Print JSON instead of tables")
@click.option("--list-models", is_flag=True, help="List the bundled models and exit")
@click.option("--list-gpus", is_flag=True, help="List the known GPUs and exit")
def plan(
    planner_model: str | None,
    gpu: str | None,
    gpu_file: str | None,
    gpu_count: int | None,
    flags: tuple[str, ...],
    prompts: int | None,
    input_len: float | None,
    output_len: float | None,
    max_tokens: int | None,
    ignore_eos: bool | None,
    job_file: str | None,
    fleet_file: str | None,
    dataset: str | None,
    tokenizer: str | None,
    sample_rows: int | None,
    eta: float | None,
    compare_gpus: tuple[str, ...],
    sglang_version: str | None,
    train_max_length: int | None,
    output_sigma: float | None,
    with_what_if: bool,
    as_json: bool,
    list_models: bool,
    list_gpus: bool,
) -> None:
    """Predict SGLang pool sizes, concurrency and decode throughput, and rank better flags.

    \b
    Example:
        tokenmill plan --planner-model qwen3.6-27b --gpu rtx-pro-6000
        tokenmill plan -m qwen3.6-27b -g rtx-pro-6000 --gpus 8 --prompts 200000 \\
            --input-len 900 --output-len 3000 --flags "--mamba-radix-cache-strategy extra_buffer" --compare h100
        tokenmill plan -m qwen3.6-27b -g rtx-pro-6000 --max-tokens 4096 --ignore-eos
        tokenmill plan --job job.yaml --fleet fleet.yaml --gpu h100    # the run you will do
    """
    console = Console()
    if list_models or list_gpus:
        if list_models:
            _list_models(console)
        if list_gpus:
            _list_gpus(console, GpuCatalog.load(gpu_file))
        return
    job = read_job(job_file) if job_file else None
    fleet = read_fleet(fleet_file) if fleet_file else None
    flags = (fleet.flags if fleet else ()) + flags
    given = _Given(planner_model, gpu, gpu_file, eta, sglang_version, gpu_count)
    model, gpu, gpu_file, eta, sglang_version, gpu_count = given.with_files(job, fleet)
    model = model or parse_flags(list(flags)).model_path  # `--flags "--model-path Qwen/..."` names it too
    if not model or not gpu:
        raise click.UsageError(
            "give --planner-model and --gpu (see --list-models and --list-gpus)"
            + (": a fleet profile of real servers does not say which GPU they run on" if fleet and model else "")
        )
    workload = _workload(job, prompts, input_len, output_len, max_tokens, ignore_eos, dataset, tokenizer, sample_rows)
    question = PlanQuestion(model, gpu, workload, flags, gpu_count or 1, eta, compare_gpus, gpu_file, sglang_version,
                            train_max_length, output_sigma, with_what_if)  # fmt: skip
    _print(console, answer(question), as_json)


@dataclass(frozen=True, slots=True)
class _Given:
    """What the planner plans on, as the options give it (None: not given)."""

    model: str | None
    gpu: str | None
    gpu_file: str | None
    eta: float | None
    sglang_version: str | None
    gpu_count: int | None

    def with_files(
        self, job: JobRequests | None, fleet: FleetServers | None
    ) -> tuple[str | None, str | None, str | None, float | None, str | None, int | None]:
        """The options given, else the job's (its monitor section), else the fleet profile's."""
        model = self.model or (job.planner_model if job else None) or (fleet.model if fleet else None)
        gpu = self.gpu or (job.gpu if job else None) or (fleet.gpu if fleet else None)
        gpu_file = self.gpu_file or (job.gpu_file if job else None)
        eta = self.eta if self.eta is not None else (fleet.eta if fleet else None)
        version = self.sglang_version or (fleet.sglang_version if fleet else None)
        gpus = self.gpu_count or (fleet.gpus if fleet else None)
        return model, gpu, gpu_file, eta, version, gpus


def _workload(
    job: JobRequests | None,
    prompts: int | None,
    input_len: float | None,
    output_len: float | None,
    max_tokens: int | None,
    ignore_eos: bool | None,
    dataset: str | None,
    tokenizer: str | None,
    sample_rows: int | None,
) -> WorkloadQuestion:
    """The workload as the options give it, the job's where they do not (its input measured unless --dataset)."""
    if job is None:
        return WorkloadQuestion(prompts, input_len, output_len, dataset, tokenizer, sample_rows, max_tokens,
                                bool(ignore_eos))  # fmt: skip
    return WorkloadQuestion(
        prompts,
        input_len,
        output_len,
        dataset if dataset is not None else job.input,
        tokenizer or job.tokenizer,
        sample_rows,
        max_tokens if max_tokens is not None else job.max_tokens,
        job.ignore_eos if ignore_eos is None else ignore_eos,
        job.answers_per_row if dataset is None else 1,
    )


def _print(console: Console, found: PlanAnswer, as_json: bool) -> None:
    if found.report is None:  # the configuration does not fit; some of the what-ifs do
        if as_json:
            click.echo(
                json.dumps({"error": str(found.does_not_fit), "what_if": what_if_dicts(found.what_if)}, indent=2)
            )
        else:
            console.print(f"[bold red]{found.does_not_fit}[/]\nConfigurations that fit:")
            console.print(what_if_table(0.0, found.what_if, found.config.whatif_rows_shown))
        return
    cut = found.cut
    if as_json:
        data = report_dict(found.report)
        if cut is not None:
            data["train_cut"] = {"max_length": cut.max_length, "records": cut.records, "tokens": cut.tokens,
                                 "sigma": cut.sigma}  # fmt: skip
        click.echo(json.dumps(data, indent=2))
    else:
        console.print(render_plan(found.report))
        if cut is not None:
            console.print(cut.text())
