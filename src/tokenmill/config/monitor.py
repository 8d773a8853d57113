"""Watching a run: scrapes, event log, metrics exporter and the doctor's thresholds."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model


class DoctorSpec(Model):
    """Thresholds of the doctor's rules (``tokenmill.doctor.rules``); fractions are of a pool or of a cap."""

    pool_full: float = Field(default=0.90, gt=0, le=1, description="A pool (KV or state) this full counts as full")
    pool_roomy: float = Field(
        default=0.80, gt=0, le=1, description="A pool below this has room to spare (it is not what binds)"
    )
    at_cap: float = Field(
        default=0.90, gt=0, le=1, description="Running requests at least this share of max running is at the cap"
    )
    queue_waiting: float = Field(
        default=1.0, ge=0, description="A mean server queue at least this long means requests are waiting"
    )
    client_at_limit: float = Field(
        default=0.95, gt=0, le=1, description="Client in-flight at least this share of its limit is at the limit"
    )
    prefill_ratio: float = Field(
        default=4.0, gt=0, description="Prompt tokens/s at least this many times output tokens/s is prefill-heavy"
    )
    retractions_per_min: float = Field(
        default=1.0, gt=0, description="Retractions (SGLang) or preemptions (vLLM) per minute worth a verdict"
    )
    flap_transitions: int = Field(
        default=3, ge=2, description="Up/down changes within flap_window_s that make a server flapping"
    )
    flap_window_s: float = Field(default=600.0, gt=0, description="Window for counting up/down changes")
    down_after_s: float = Field(default=10.0, ge=0, description="Unreachable this long counts as down")
    timeout_recent_s: float = Field(
        default=300.0,
        gt=0,
        description="A request that outlived the read timeout in a busy server's queue this recently makes the "
        "queue-timeout verdict",
    )
    upload_behind_s: float = Field(
        default=600.0,
        gt=0,
        description="The oldest sealed shard not yet uploaded this long makes the uploads-behind verdict",
    )
    client_cpu: float = Field(
        default=0.90, gt=0, description="Client process CPU (share of one core) that makes the client the limit"
    )
    loop_lag_s: float = Field(
        default=0.25, gt=0, description="Event-loop lag that makes the client the limit (late timers)"
    )
    low_cache_hit: float = Field(
        default=0.10, ge=0, le=1, description="A prefix-cache hit rate below this means the radix cache buys little"
    )
    feed_headroom: float = Field(
        default=1.25, ge=1, description="Recommended client in-flight per server, as a multiple of its max running"
    )
    confirm_rounds: int = Field(
        default=2, ge=1, description="Scrape rounds a verdict must hold before it is shown or cleared"
    )
    min_gain: float = Field(
        default=0.01,
        ge=0,
        description="A change the planner predicts to gain less than this share of a server's throughput is not "
        "shown (it cannot help); verdicts are ranked by their best change's predicted gain",
    )
    prefill_dominates: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of a server's GPU time spent prefilling (the planner's picture of it) from which prefill "
        "is what binds, whatever the prompt/output token ratio",
    )
    truncated_share: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="Share of answers cut at max_tokens (finish reason length) from which the doctor says so, "
        "naming sampling.max_tokens",
    )
    truncated_min_answers: int = Field(
        default=20, ge=1, description="Answers the client must have received before the truncated share counts"
    )
    truncated_target: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="The share of answers the suggested max_tokens would still cut (a log-normal fit of the "
        "answer lengths seen so far)",
    )
    oneshot_samples: int = Field(
        default=4, ge=2, description="Least scrapes per server in `tokenmill doctor` (it goes on until rates settle)"
    )
    oneshot_interval_s: float = Field(default=2.0, gt=0, description="Seconds between those scrapes")
    oneshot_max_s: float = Field(
        default=60.0,
        gt=0,
        description="`tokenmill doctor` samples until the rates settle, at most this long (then says how noisy "
        "they are)",
    )
    oneshot_settle: float = Field(
        default=0.10,
        gt=0,
        description="Rates have settled when the fleet's decode and prompt rates over the whole sampling differ "
        "by less than this share from the estimate a third of the time earlier",
    )


class MonitorSpec(Model):
    """Watching the fleet during a run: scrapes, rates, the event log, the exporter and the doctor."""

    enabled: bool = Field(default=True, description="Scrape the servers' /metrics (off: client-side numbers only)")
    scrape_interval_s: float = Field(default=3.0, ge=0.2, description="Seconds between two scrapes of a server")
    scrape_timeout_s: float = Field(default=2.0, gt=0, description="A scrape slower than this counts as failed")
    origin_wait_s: float = Field(
        default=10.0,
        ge=0,
        description="At start, how long the run waits for each server to say what it serves (model, engine, "
        "version, flags: every record's origin); a slower one is asked in the background",
    )
    rate_window_s: float = Field(default=30.0, gt=0, description="Window over which rates (tok/s, ...) are taken")
    event_interval_s: float = Field(
        default=10.0, gt=0, description="Seconds between two snapshots in OUT/events.jsonl (the report's data)"
    )
    history_points: int = Field(default=60, ge=2, description="Throughput points in the dashboard's sparkline")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve tokenmill_* Prometheus metrics on this port (0: any free)"
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the metrics port binds (loopback unless you mean otherwise)"
    )
    gpu: str | None = Field(
        default=None, description="GPU of the servers (e.g. h100), for the doctor's predicted gains"
    )
    compare_gpu: str | None = Field(
        default=None,
        description="Another GPU (e.g. b200) to set the run against: the same model, flags and workload planned on "
        "it, and the run's decode rate as a share of that (status line, summary, tick)",
    )
    gpu_file: str | None = Field(
        default=None,
        description="YAML file of GPUs beyond the bundled ones (as `tokenmill plan --gpu-file`), for a gpu it names",
    )
    planner_model: str | None = Field(
        default=None,
        description="Model for the doctor's predictions (bundled name or config.json; default: the servers' "
        "model_path when the planner knows it)",
    )
    doctor: DoctorSpec = Field(default_factory=DoctorSpec)
