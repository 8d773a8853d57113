"""``tokenmill demo``: the whole pipeline on this machine, no GPU needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from tokenmill.cli.options import LocalPath, renamed
from tokenmill.cli.run import execute
from tokenmill.config import JobSpec
from tokenmill.errors import ConfigError
from tokenmill.output import layout

# written first into a directory the demo creates: a demo stopped before its first record still owns it
DEMO_MARKER = ".tokenmill-demo"
SERVERS = 4  # simulated servers started
DEMO_DEGENERATE = {"loop_rate": 0.03, "empty_rate": 0.01, "unclosed_think_rate": 0.01}
DEMO_RESAMPLING = {"frequency_penalty": 0.5}


def _claim(out: Path, fresh: bool) -> None:
    """Make ``out`` the demo's: start over in a directory an earlier demo (or run) left, refuse anyone else's."""
    if out.exists():
        ours = (out / DEMO_MARKER).exists() or (out / layout.JOB).exists()
        if not ours and any(out.iterdir()):
            raise ConfigError(f"{out} exists and is not a tokenmill output; choose another --output")
        if fresh:
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).touch()


@click.command()
@click.option(
    "--server-count", "n_servers", type=click.IntRange(min=1), help=f"Simulated servers to start [default: {SERVERS}]."
)
@renamed("--servers", "--server-count", "n_servers", type=click.IntRange(min=1))
@click.option(
    "--output",
    "-o",
    default="tokenmill-demo",
    show_default=True,
    type=LocalPath("the demo writes a local output directory"),
    help="Output directory.",
)
@click.option("--limit", type=int, default=None, help="Use only the first N sample prompts.")
@click.option("--fresh/--resume", default=True, show_default=True, help="Start over, or continue a stopped demo.")
@click.option("--live/--no-live", default=None, help="Force the live display on or off.")
def demo(n_servers: int | None, output: str, limit: int | None, fresh: bool, live: bool | None) -> None:
    """Start a local fleet of simulated SGLang servers and complete the bundled sample dataset.

    About a minute on two cores. The output directory then holds the shards, the manifest and a summary;
    try `tokenmill verify tokenmill-demo` afterwards.
    """
    from tokenmill.cli.regenerate import regenerate_round
    from tokenmill.fleet.simprocs import sim_fleet
    from tokenmill.quality.corpus import inspect_output
    from tokenmill.sources import sample_dataset_path

    out = Path(output)
    n_servers = n_servers or SERVERS
    _claim(out, fresh)
    # Twins of a 27B GDN hybrid on RTX PRO 6000 with SGLang's default flags, where the recurrent-state pool (not
    # the KV cache) caps concurrency: the doctor's verdict shows what to change. Ten times real speed. Like a
    # sampling model, they spoil a few answers (loops, empty answers, thinking that never ends), which the demo
    # then finds and answers again.
    sim_args = ["--model", "qwen3.6-27b", "--gpu", "rtx-pro-6000", "--time-scale", "0.1", "--output-len-mean", "200"]
    sim_args += [f"--{name.replace('_', '-')}={rate}" for name, rate in DEMO_DEGENERATE.items()]
    click.echo(f"starting {n_servers} simulated SGLang servers ...", err=True)
    with sim_fleet(n_servers, sim_args, log_dir=out) as sims:
        job = JobSpec.model_validate(
            {
                "input": {"path": str(sample_dataset_path()), "id_field": "id", "limit": limit},
                "servers": [s.url for s in sims],
                "api": "openai-chat",
                "model": "tokenmill-sim",
                "sampling": {"max_tokens": 600, "temperature": 0.7},
                "output": {"dir": str(out)},
                "status_interval_s": 5,
                # more than the twins run, as a hand-set job would: their standing queue is what the doctor
                # reads within this short run (concurrency: auto would keep just a few requests waiting)
                "concurrency": 64,
            }
        )
        execute(job, allow_changed_job=False, live=live, log_level="INFO")
        click.echo(inspect_output(out).render(), err=True)
        click.echo("\nanswering the degenerate ones again, with a frequency penalty:", err=True)
        regenerate_round(job, ("degenerate",), DEMO_RESAMPLING, live=live)
    click.echo(
        f"done: shards, manifest and summary are in {out}/ — check them with `tokenmill verify {out}`, "
        f"see what is in them with `tokenmill inspect {out}`",
        err=True,
    )
