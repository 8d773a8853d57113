"""The Grafana board of a run (``observability/grafana/tokenmill.json``): its panels, one row each, over the metric
table (:data:`~tokenmill.run.metrics.METRICS`), the recording rules and the servers' own ``sglang:`` / ``vllm:``
series.

Every target says whether a live run against twins must return data for it (``always``): the real-Prometheus test
evaluates each such query, and the static check (:func:`tokenmill.observe.names.unknown_names`) refuses a name no
row, no rule and no engine map defines. The JSON holds what Grafana's import needs: ``uid``, ``schemaVersion``, a
``datasource`` variable, and panels with targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UID = "tokenmill-run"
SCHEMA_VERSION = 39  # Grafana 10.4 and later import it
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True, slots=True)
class Target:
    expr: str
    legend: str = ""
    always: bool = True  # the real-Prometheus test's run (twins, output.remote, max_backlog set) returns data for it


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    description: str = ""


def _t(expr: str, legend: str = "", always: bool = True) -> Target:
    return Target(expr, legend, always)


def _per(metric: str, by: str = "server") -> str:
    """One series per server, whichever of the job's clients reports it (a partitioned job's clients all do)."""
    return f"max by ({by}) ({metric})"


RATE = "[5m]"
PANELS: tuple[Panel, ...] = (
    Panel("Fleet decode and client output tok/s", "short", (
        _t("tokenmill:decode_tokens_per_second:sum", "servers decode"),
        _t("tokenmill:client_output_tokens:rate1m", "client output"),
    ), description="Decode from the servers' own counters; output tokens of finished completions as the client "
       "counts them"),
    Panel("Share of expected and of the roofline", "percentunit", (
        _t("tokenmill:expected_share", "of expected (planner)"),
        _t("tokenmill:roofline_share", "of the roofline"),
    ), description="The fleet's decode rate over what the planner expects of its flags and GPUs, and over the "
       "roofline's ceiling"),
    Panel("Completions/s", "short", (_t("tokenmill:completions:rate1m", "completions/s"),)),
    Panel("ETA", "s", (_t("max(tokenmill_eta_seconds)", "ETA"),), kind="stat", width=6),
    Panel("Progress", "percentunit", (_t("tokenmill:progress", "done"),), kind="stat", width=6),
    Panel("Running, queued and max running per server", "short", (
        _t(_per("tokenmill_server_running"), "running {{server}}"),
        _t(_per("tokenmill_server_queued"), "queued {{server}}"),
        _t(_per("tokenmill_server_max_running"), "max running {{server}}"),
    )),
    Panel("Client in flight and limit per server", "short", (
        _t("sum by (server) (tokenmill_inflight)", "in flight {{server}}"),
        _t("sum by (server) (tokenmill_inflight_limit)", "limit {{server}}"),
    )),
    Panel("KV and state pool usage", "percentunit", (
        _t(_per("tokenmill_server_kv_usage"), "KV {{server}}"),
        _t(_per("tokenmill_server_state_usage"), "state {{server}}"),
    ), description="State (Mamba) pool: hybrid models only"),
    Panel("Retractions per minute", "short", (
        _t(_per("tokenmill_server_retractions_per_minute"), "{{server}}"),
    )),
    Panel("Failures, retries and abandoned requests per second", "short", (
        _t(f"sum(rate(tokenmill_failures_total{RATE}))", "failed"),
        _t(f"sum(rate(tokenmill_retries_total{RATE}))", "retried"),
        _t(f"sum(rate(tokenmill_abandoned_requests_total{RATE}))", "abandoned"),
        _t(f"sum by (error) (rate(tokenmill_request_errors_total{RATE}))", "{{error}}", always=False),
    )),
    Panel("Answers cut at max_tokens", "percentunit", (
        _t("tokenmill:truncated:ratio10m", "last 10 minutes"),
        _t("max(tokenmill_truncated_ratio)", "this run"),
    )),
    Panel("Upload backlog", "short", (
        _t("sum(tokenmill_upload_pending_shards)", "shards waiting"),
        _t("max(tokenmill_upload_max_backlog_shards)", "output.upload.max_backlog"),
    ), width=6),
    Panel("Oldest shard waiting for upload", "s", (
        _t("max(tokenmill_upload_oldest_pending_seconds)", "oldest"),
    ), width=6),
    Panel("Binding resource (the doctor)", "short", (
        _t("max by (resource) (tokenmill_binding)", "{{resource}}"),
        _t("max by (rule) (tokenmill_doctor_verdict)", "verdict {{rule}}"),
    )),
    Panel("Progress per partition", "percentunit", (
        _t("max by (partition) (tokenmill_prompts_done * on (instance, job) group_left (partition) "
           "tokenmill_run_info) / max by (partition) (tokenmill_input_rows * on (instance, job) group_left "
           "(partition) tokenmill_run_info)", "partition {{partition}}"),
    )),
    Panel("Request latency p50 / p90 per server", "s", (
        _t(f"histogram_quantile(0.5, sum by (le, server) (rate(tokenmill_request_latency_seconds_bucket{RATE})))",
           "p50 {{server}}"),
        _t(f"histogram_quantile(0.9, sum by (le, server) (rate(tokenmill_request_latency_seconds_bucket{RATE})))",
           "p90 {{server}}"),
    )),
    Panel("Client CPU and event-loop lag", "short", (
        _t("max(tokenmill_client_cpu_ratio)", "CPU (cores)"),
        _t("max(tokenmill_event_loop_lag_seconds)", "loop lag (s)"),
    )),
    Panel("SGLang: decode and prefill tok/s (its own counters)", "short", (
        _t('sum by (instance) (rate(sglang:realtime_tokens_total{mode="decode"}[1m]))', "decode {{instance}}"),
        _t('sum by (instance) (rate(sglang:realtime_tokens_total{mode="prefill_compute"}[1m]))',
           "prefill {{instance}}"),
    )),
    Panel("SGLang: running and queued", "short", (
        _t("sum by (instance) (sglang:num_running_reqs)", "running {{instance}}"),
        _t("sum by (instance) (sglang:num_queue_reqs)", "queued {{instance}}"),
    )),
    Panel("SGLang: KV and Mamba pools", "percentunit", (
        _t("max by (instance) (sglang:token_usage)", "KV {{instance}}"),
        _t("max by (instance) (sglang:mamba_usage)", "Mamba {{instance}}"),
    )),
    Panel("SGLang: prefix reuse and retractions", "short", (
        _t('sum by (instance) (rate(sglang:realtime_tokens_total{mode="prefill_cache"}[5m])) / sum by (instance) '
           '(rate(sglang:realtime_tokens_total{mode=~"prefill_cache|prefill_compute"}[5m]) > 0)',
           "prefix reuse {{instance}}"),
        _t("sum by (instance) (rate(sglang:num_retracted_requests_total[5m])) * 60", "retracted/min {{instance}}",
           always=False),
    ), description="SGLang writes its retraction counters from the first retraction on"),
    Panel("vLLM: generation tok/s, running and waiting", "short", (
        _t("sum by (instance) (rate(vllm:generation_tokens_total[1m]))", "generated {{instance}}", always=False),
        _t("sum by (instance) (vllm:num_requests_running)", "running {{instance}}", always=False),
        _t("sum by (instance) (vllm:num_requests_waiting)", "waiting {{instance}}", always=False),
    )),
    Panel("vLLM: KV cache and preemptions", "short", (
        _t("max by (instance) (vllm:kv_cache_usage_perc)", "KV {{instance}}", always=False),
        _t("sum by (instance) (rate(vllm:num_preemptions_total[5m])) * 60", "preempted/min {{instance}}",
           always=False),
    )),
)  # fmt: skip


def targets() -> list[Target]:
    return [t for p in PANELS for t in p.targets]


def _panel(n: int, panel: Panel, x: int, y: int) -> dict[str, Any]:
    refs = "ABCDEFGHIJ"
    return {
        "id": n,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}} if panel.kind == "timeseries" else {},
        "targets": [
            {"refId": refs[i], "datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend}
            for i, t in enumerate(panel.targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The board as Grafana imports it."""
    panels, x, y = [], 0, 0
    for n, panel in enumerate(PANELS, start=1):
        if x + panel.width > 24:
            x, y = 0, y + 8
        panels.append(_panel(n, panel, x, y))
        x += panel.width
    return {
        "uid": UID,
        "title": "tokenmill run",
        "description": "A tokenmill job: throughput against the plan, progress, the servers' pools, the doctor, "
        "uploads and the corpus (generated by scripts/gen_observability.py; do not edit)",
        "tags": ["tokenmill"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "utc",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "panels": panels,
    }
