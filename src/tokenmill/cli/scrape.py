"""``tokenmill scrape-config``: a Prometheus scrape configuration for a job's exporter(s) and its servers."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from tokenmill.errors import ConfigError


def _servers(job_file: str) -> tuple[list[str], list[str]]:
    """The job's servers (its list and its servers file) and its exporter, when its port is fixed."""
    from tokenmill.config import load_job
    from tokenmill.config.servers import read_servers

    job = load_job(job_file)
    urls = dict.fromkeys(job.servers)
    if job.servers_file:
        urls.update(dict.fromkeys(ep.url for ep in read_servers(job.servers_file)))
    port = job.monitor.metrics_port
    exporters = [f"{job.monitor.metrics_host}:{port}"] if port else []
    return list(urls), exporters


@click.command("scrape-config")
@click.argument("job_file", metavar="JOB.yaml", type=click.Path(exists=True, dir_okay=False))
@click.option("--exporter", "exporters", multiple=True, metavar="HOST:PORT",
              help="A client's --metrics-port to scrape; repeat for each partition (the i-th labelled partition i). "
              "Default: the job's monitor.metrics_host:metrics_port.")  # fmt: skip
@click.option("--file-sd", metavar="DIR", help="Read the clients from every DIR/*.json instead (a Slurm array's "
              "tasks each write one with --target).")  # fmt: skip
@click.option(
    "--target",
    "partition",
    type=int,
    metavar="PARTITION",
    help="Write one client's file-discovery target (its --exporter, labelled with PARTITION) instead.",
)
@click.option("--interval", default="15s", show_default=True, help="Prometheus's scrape interval.")
@click.option(
    "--rules",
    default="tokenmill.rules.yml",
    show_default=True,
    help="The rules file to load (observability/prometheus/tokenmill.rules.yml); '' for none.",
)
@click.option("--to", "dest", type=click.Path(dir_okay=False), help="File to write (default: standard output).")
def scrape_config(
    job_file: str, exporters: tuple[str, ...], file_sd: str | None, partition: int | None, interval: str,
    rules: str, dest: str | None,
) -> None:  # fmt: skip
    """Write a Prometheus configuration that scrapes the job's client (its --metrics-port, job `tokenmill`) and
    every server of JOB.yaml (its list and servers file; job `tokenmill-servers`), with the rules file that the
    Grafana board of observability/ reads.

    \b
    Examples:
        tokenmill scrape-config job.yaml --exporter 10.0.0.9:9400 --to prometheus.yml
        tokenmill scrape-config job.yaml --file-sd /shared/targets --to prometheus.yml   # a Slurm array
        tokenmill scrape-config job.yaml --target "$SLURM_ARRAY_TASK_ID" --exporter "$(hostname):9400" \\
            --to "/shared/targets/$SLURM_ARRAY_TASK_ID.json"
    """
    from tokenmill.observe.scrape import scrape_config as build
    from tokenmill.observe.scrape import target_file

    servers, default = _servers(job_file)
    if partition is not None:
        if len(exporters) != 1:
            raise ConfigError("--target writes one client's target: give its --exporter HOST:PORT once")
        text = json.dumps(target_file(exporters[0], partition), indent=2) + "\n"
    else:
        config = build(servers, list(exporters) or ([] if file_sd else default), interval=interval,
                       file_sd=file_sd, rules=rules or None)  # fmt: skip
        text = yaml.safe_dump(config, sort_keys=False)
    if dest is None:
        click.echo(text, nl=False)
        return
    Path(dest).write_text(text)
    what = "target" if partition is not None else f"scrape configuration ({len(servers)} server(s))"
    click.echo(f"{what} written to {dest}", err=True)
