"""A Prometheus scrape configuration for a job and its fleet: the run's exporter(s) and every server's ``/metrics``.

Two jobs: ``tokenmill`` (each client's ``--metrics-port``; one per partition of a split job, labelled
``partition``) and ``tokenmill-servers`` (the servers themselves, for ``up`` and their own ``sglang:`` / ``vllm:``
series). Targets are listed statically, or read from a file-discovery directory (``file_sd``) that a Slurm array's
tasks each write one file into (:func:`target_file`); ``observability/examples/`` has the Slurm and Kubernetes forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tokenmill.config import normalize_url
from tokenmill.errors import ConfigError
from tokenmill.observe.rules import SERVERS_JOB

CLIENT_JOB = "tokenmill"
RULES_FILE = "tokenmill.rules.yml"


def host_port(url: str) -> str:
    """``http://10.0.0.1:30000/`` -> ``10.0.0.1:30000`` (a ConfigError names a URL without a port)."""
    parts = urlsplit(normalize_url(url))
    if not parts.hostname or parts.port is None:
        raise ConfigError(f"{url!r} has no host:port to scrape; give it as http://HOST:PORT")
    return f"{parts.hostname}:{parts.port}"


def _scheme(url: str) -> str:
    return urlsplit(normalize_url(url)).scheme


def scrape_config(
    servers: Sequence[str],
    exporters: Sequence[str],
    *,
    interval: str = "15s",
    file_sd: str | None = None,
    rules: str | None = RULES_FILE,
) -> dict[str, Any]:
    """The ``prometheus.yml`` of a job: ``exporters`` (``HOST:PORT`` each, the i-th labelled ``partition`` i when
    there are several) or, with ``file_sd``, every ``*.json`` target file in that directory; and ``servers``."""
    if not exporters and file_sd is None:
        raise ConfigError(
            "no exporter to scrape: set monitor.metrics_port in the job, give --exporter HOST:PORT, or --file-sd DIR"
        )
    clients: dict[str, Any] = {"job_name": CLIENT_JOB, "scrape_interval": interval}
    if file_sd is not None:
        clients["file_sd_configs"] = [{"files": [f"{file_sd.rstrip('/')}/*.json"], "refresh_interval": "30s"}]
    else:
        many = len(exporters) > 1
        clients["static_configs"] = [
            {"targets": [host_port(e)], **({"labels": {"partition": str(i)}} if many else {})}
            for i, e in enumerate(exporters)
        ]
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [clients],
    }
    if rules:
        config["rule_files"] = [rules]
    by_scheme: dict[str, list[str]] = {}
    for url in servers:
        by_scheme.setdefault(_scheme(url), []).append(host_port(url))
    for scheme, targets in sorted(by_scheme.items()):
        job = {"job_name": SERVERS_JOB, "scrape_interval": interval, "metrics_path": "/metrics"}
        if len(by_scheme) > 1:
            job["job_name"] = f"{SERVERS_JOB}-{scheme}"
        config["scrape_configs"].append({**job, "scheme": scheme, "static_configs": [{"targets": targets}]})
    return config


def target_file(exporter: str, partition: int | None) -> list[dict[str, Any]]:
    """One client's file-discovery target (``DIR/<partition>.json``): its exporter, labelled with its partition."""
    labels = {} if partition is None else {"partition": str(partition)}
    return [{"targets": [host_port(exporter)], "labels": labels}]
