"""The Prometheus rules of a run (``observability/prometheus/tokenmill.rules.yml``): recording rules the board
reads, and the alerts, with thresholds from :class:`~tokenmill.config.observe.AlertSpec`.

A server counts once however many of a job's clients watch it (``max by (server)``); shares filter a zero
denominator, so an idle fleet has no share rather than NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenmill.config.observe import AlertSpec

GROUP = "tokenmill"
SERVERS_JOB = "tokenmill-servers"  # the scrape job of the servers' own /metrics (tokenmill.observe.scrape)

_DECODE = "max by (server) (tokenmill_server_decode_tokens_per_second)"
_EXPECTED = "max by (server) (tokenmill_server_expected_decode_tokens_per_second)"
_ROOFLINE = "max by (server) (tokenmill_server_roofline_decode_tokens_per_second)"
_FINISHED = "sum(rate(tokenmill_completions_total[10m])) + sum(rate(tokenmill_failures_total[10m]))"

RECORDED: dict[str, str] = {
    "tokenmill:decode_tokens_per_second:sum": f"sum({_DECODE})",
    "tokenmill:client_output_tokens:rate1m": "sum(rate(tokenmill_output_tokens_total[1m]))",
    "tokenmill:completions:rate1m": "sum(rate(tokenmill_completions_total[1m]))",
    "tokenmill:expected_share": f"sum({_DECODE} and on (server) {_EXPECTED}) / (sum({_EXPECTED}) > 0)",
    "tokenmill:roofline_share": f"sum({_DECODE} and on (server) {_ROOFLINE}) / (sum({_ROOFLINE}) > 0)",
    "tokenmill:progress": "sum(tokenmill_prompts_done) / (sum(tokenmill_input_rows) > 0)",
    "tokenmill:truncated:ratio10m": 'sum(rate(tokenmill_finish_reasons_total{reason="length"}[10m])) / '
    "(sum(rate(tokenmill_finish_reasons_total[10m])) > 0)",
    "tokenmill:failures:ratio10m": f"sum(rate(tokenmill_failures_total[10m])) / (({_FINISHED}) > 0)",
}


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def alerts(spec: AlertSpec) -> tuple[Alert, ...]:
    """The alerts, with ``spec``'s thresholds."""
    return (
        Alert("TokenmillServerDown",
              f'up{{job=~"{SERVERS_JOB}.*"}} == 0 or max by (server) (tokenmill_server_up) == 0',
              spec.server_down_for, "critical", "An inference server is down: {{ $labels.instance }}{{ "
              "$labels.server }}", "Its /metrics does not answer. The run sets it aside and probes it; restart "
              "it (`tokenmill fleet status`) or drain it from the servers file."),
        Alert("TokenmillNoProgress",
              f"delta(tokenmill_prompts_done[{spec.no_progress_window}]) <= 0 unless on (instance, job) "
              "(tokenmill_prompts_done >= tokenmill_input_rows)",
              spec.no_progress_for, "critical", "No prompt finished in {{ $labels.instance }} for "
              f"{spec.no_progress_window}", "The run is stalled: see the doctor's verdict on its live page (/) "
              "and `tokenmill status`."),
        Alert("TokenmillThroughputLow", f"tokenmill:expected_share < {spec.slow_share:g}", spec.slow_for,
              "warning", f"The fleet decodes below {spec.slow_share:.0%} of what the planner expects",
              "Compare the binding resource on the board; `tokenmill doctor --servers ...` names the flags to "
              "change."),
        Alert("TokenmillUploadBacklog",
              "tokenmill_upload_pending_shards > on (instance, job) tokenmill_upload_max_backlog_shards or "
              "tokenmill_upload_pending_bytes > on (instance, job) tokenmill_upload_max_backlog_bytes or "
              "tokenmill_generation_paused == 1",
              spec.backlog_for, "critical", "Uploads are past output.upload.max_backlog: generation is paused",
              "The store does not keep up or fails (tokenmill_upload_failing); generation resumes when half of "
              "the backlog is uploaded."),
        Alert("TokenmillUploadBehind", f"tokenmill_upload_oldest_pending_seconds > {spec.upload_behind_s:g}",
              "0s", "warning", "A sealed shard has waited over {{ $value | humanizeDuration }} for upload",
              "Check the store's credentials and reachability; the run's log says the store's error."),
        Alert("TokenmillFailureRate", f"tokenmill:failures:ratio10m > {spec.failure_share:g}", spec.failure_for,
              "warning", f"Over {spec.failure_share:.0%} of prompts failed in the last 10 minutes",
              "failed.jsonl says why; `tokenmill retry-failed` answers them again."),
        Alert("TokenmillTruncation", f"tokenmill:truncated:ratio10m > {spec.truncated_share:g}",
              spec.truncated_for, "warning", f"Over {spec.truncated_share:.0%} of answers hit max_tokens",
              "Answers cut at sampling.max_tokens are not whole; the doctor suggests a limit."),
    )  # fmt: skip


def rules(spec: AlertSpec | None = None) -> dict[str, Any]:
    """The rules file as Prometheus loads it."""
    spec = spec or AlertSpec()
    recorded = [{"record": name, "expr": expr} for name, expr in RECORDED.items()]
    alerting = [
        {
            "alert": a.name,
            "expr": a.expr,
            "for": a.for_,
            "labels": {"severity": a.severity},
            "annotations": {"summary": a.summary, "description": a.description},
        }
        for a in alerts(spec)
    ]
    return {"groups": [{"name": GROUP, "interval": spec.evaluation_interval, "rules": recorded + alerting}]}
