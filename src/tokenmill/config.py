"""Job spec, sampling, retry policy and simulated-server settings: the one home of every default.

A job file is YAML validated by :class:`JobSpec`; :func:`load_job` turns pydantic's errors into a
:class:`~tokenmill.errors.ConfigError` that names each bad field and how to fix it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

from tokenmill.errors import ConfigError

ApiKind = Literal["openai-chat", "openai-completions", "sglang-generate"]
BadRowPolicy = Literal["error", "skip"]
Mapping = Literal["auto", "messages", "conversations", "prompt"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class HFInput(_Model):
    """A Hugging Face dataset, read with ``datasets`` in streaming mode."""

    dataset: str = Field(description="Dataset id on the Hub, or a local dataset directory")
    config: str | None = Field(default=None, description="Dataset configuration name")
    split: str = Field(default="train", description="Split to read")


AUTO_ID_FIELD = "auto"  # input.id_field: the AUTO_ID_COLUMN when the input has one, else the row index
AUTO_ID_COLUMN = "id"


class InputSpec(_Model):
    """Where the prompts come from and how a row becomes a prompt."""

    path: str | None = Field(default=None, description="Local jsonl/json/parquet file, directory or glob")
    hf: HFInput | None = Field(default=None, description="A Hugging Face dataset instead of a local path")
    format: Literal["auto", "jsonl", "json", "parquet"] = "auto"
    mapping: Mapping = Field(default="auto", description="Which column holds the prompt")
    messages_field: str = "messages"
    conversations_field: str = "conversations"
    prompt_field: str = "prompt"
    id_field: str | None = Field(
        default=AUTO_ID_FIELD,
        description="Column with stable ids. auto: the 'id' column when the input's first row has one, else the "
        "row index (the choice is recorded in OUT/job.json); null: always the row index",
    )
    system_prompt: str | None = Field(default=None, description="Prepended as a system message")
    conversation_turns: Literal["first", "history", "all"] = Field(
        default="first",
        description="first: system + first user turn; history: everything up to the last user turn; "
        "all: every user turn, each regenerated in order (what `regenerate: all` sets)",
    )
    offset: int = Field(default=0, ge=0, description="Skip this many rows first (trial runs)")
    limit: int | None = Field(default=None, ge=1, description="Read at most this many rows (trial runs)")
    on_bad_row: BadRowPolicy = Field(default="error", description="error: stop with file:line; skip: record")

    @model_validator(mode="after")
    def _one_source(self) -> InputSpec:
        if (self.path is None) == (self.hf is None):
            raise ValueError("give exactly one of input.path (local files) or input.hf (a dataset id)")
        return self


class SamplingSpec(_Model):
    """Sampling parameters sent with every request."""

    max_tokens: int = Field(default=2048, ge=1)
    temperature: float = Field(default=0.7, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None)
    stop: list[str] | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Merged into every request body (e.g. chat_template_kwargs)"
    )

    def as_dict(self) -> dict[str, Any]:
        """The parameters as recorded in each completion (no Nones)."""
        out = {k: v for k, v in self.model_dump().items() if v is not None and k != "extra_body"}
        if self.extra_body:
            out["extra_body"] = self.extra_body
        return out


def backoff(attempt: int, base_s: float, max_s: float) -> float:
    """The wait before retry ``attempt`` (1, 2, ...): ``base_s`` doubling each time, at most ``max_s``."""
    return min(max_s, base_s * 2.0 ** min(max(attempt, 1) - 1, 60))


class RetrySpec(_Model):
    """How failures are retried, and when a server is set aside."""

    max_attempts: int = Field(default=8, ge=1, description="Attempts per prompt for transient errors")
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=1800.0, gt=0, description="Per request; long generations take time")
    max_response_mb: float = Field(
        default=64.0, gt=0, description="A response body larger than this is refused (a broken or hostile server)"
    )
    quarantine_after: int = Field(default=5, ge=1, description="Consecutive failures before quarantine")
    probe_interval_s: float = Field(default=5.0, gt=0, description="How often a quarantined server is probed")
    stop_grace_s: float = Field(
        default=10.0, ge=0, description="After a stop request, how long requests in flight may finish (then: resume)"
    )

    def backoff_s(self, attempt: int) -> float:
        """The wait before retrying a prompt after its ``attempt``-th try (jitter is the dispatcher's)."""
        return backoff(attempt, self.backoff_base_s, self.backoff_max_s)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * (1 << 20))


class UploadSpec(_Model):
    """How sealed shards are copied to ``output.remote``: retries, and how long the end of a run waits."""

    backoff_base_s: float = Field(default=1.0, gt=0, description="First wait after a failed store operation")
    backoff_max_s: float = Field(
        default=60.0, gt=0, description="Longest wait between retries; while the run goes on, retries never stop"
    )
    drain_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="At the end of a run, how long to wait for pending uploads; then the run ends locally "
        "and rerunning the same command uploads the rest",
    )
    start_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="How long a run waits at its start for the store to confirm the prefix is this job's; a "
        "refused prefix stops the run there, a store that does not answer in time is retried in the background",
    )
    manifest_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="Least time between two rewrites of the remote manifest, which lists every uploaded shard "
        "(bounds the manifest traffic of long runs; the end of a run always writes it)",
    )
    side_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="Least time between two copies of the run's other records under PREFIX/_tokenmill/ (failures, "
        "skips, the event log, job.json), which let status, report and verify work from the prefix alone and a "
        "fresh machine take the job over; the end of a run always copies them",
    )


_SECRET_KEY = re.compile(r"secret|token|password|passwd|credential|key|sas|signature|auth", re.IGNORECASE)


def _mask(value: Any, key: str = "") -> Any:
    """``value`` with every entry under a secret-looking key replaced by ``***``."""
    if isinstance(value, dict):
        return {k: _mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if value is not None and _SECRET_KEY.search(key):
        return "***"
    return value


class ControlSpec(_Model):
    """How ``concurrency: auto`` sets each server's in-flight target."""

    initial: int = Field(default=64, ge=1, description="Target before a server's capacity is known")
    min: int = Field(default=1, ge=1)
    max: int = Field(default=4096, ge=1)
    queue_frac: float = Field(
        default=0.05, ge=0, description="Queue kept above what a server runs, as a fraction of its capacity"
    )
    queue_min: int = Field(default=4, ge=0, description="Smallest queue kept (hides the request round trip)")
    queue_max: int = Field(default=64, ge=0)
    throttle_factor: float = Field(default=0.7, gt=0, lt=1, description="Target multiplier after a 429/503")
    grow_factor: float = Field(
        default=1.25, gt=1, description="Growth per round while a server without a known cap is client-limited"
    )


class PartitionSpec(_Model):
    """How a split run (``run --partition I/N`` or ``--partitions N``) divides the input between its partitions."""

    by: Literal["auto", "files", "ids"] = Field(
        default="auto",
        description="files: whole input files go to partitions (file i to partition i mod N, in the input's sorted "
        "order), so no partition reads another's files; ids: every partition reads every row and keeps those with "
        "blake2b(id) mod N = its index; auto: files when the input has min_files_per_partition files per "
        "partition or more (a Hugging Face dataset: ids)",
    )
    min_files_per_partition: int = Field(
        default=4,
        ge=1,
        description="With by: auto, the input files per partition from which whole files go to partitions (fewer "
        "files would leave the partitions' shares uneven)",
    )


class OutputSpec(_Model):
    """Where completions go."""

    dir: str = Field(description="Output directory (the source of truth for resume)")
    shard_size: int = Field(default=500, ge=1, description="Completions per sealed shard")
    remote: str | None = Field(
        default=None,
        description="fsspec URL of a prefix each sealed shard is uploaded to in the background "
        "(s3://bucket/prefix/, gs://, az://, hf://, file://); credentials come from the environment",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to fsspec for output.remote, e.g. {endpoint_url: http://127.0.0.1:9000} for an "
        "S3-compatible server; values of key/secret/token-like names are masked in job.json and logs",
    )
    delete_after_upload: bool = Field(
        default=False, description="Delete a local shard once its upload is verified (sha256 of the remote copy)"
    )
    upload: UploadSpec = Field(default_factory=UploadSpec)

    @field_serializer("storage_options")
    def _masked(self, value: dict[str, Any]) -> dict[str, Any]:
        return dict(_mask(value))


class JobSpec(_Model):
    """A whole generation job."""

    input: InputSpec
    servers: list[str] = Field(default_factory=list, description="Base URLs, e.g. http://10.0.0.1:30000")
    servers_file: str | None = Field(default=None, description="A file with one base URL per line")
    servers_file_poll_s: float = Field(
        default=0.5,
        gt=0,
        description="How often servers_file is re-read during a run: servers added, removed or marked "
        "`# draining` / `# down` by `tokenmill fleet` are followed",
    )
    api: ApiKind = "openai-chat"
    model: str = Field(default="default", description="Model name sent in requests")
    tokenizer: str | None = Field(
        default=None, description="Tokenizer path for client-side chat templates (sglang-generate)"
    )
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    api_key_env: str | None = Field(default=None, description="Name of the env var holding the API key")
    concurrency: int | Literal["auto"] = Field(
        default="auto",
        description="In-flight requests per server: auto learns each server's capacity from its metrics; "
        "a number fixes it",
    )
    control: ControlSpec = Field(default_factory=lambda: ControlSpec())
    output: OutputSpec
    retry: RetrySpec = Field(default_factory=RetrySpec)
    save_token_ids: bool = Field(
        default=False,
        description="Record the prompt and completion token ids as the server produced them (checked against "
        "the first server at start: a server that does not return them is refused, never recorded as null)",
    )
    regenerate: Literal["first", "all"] = Field(
        default="first",
        description="first: one generation per row; all: every user turn of a conversation is sent in order "
        "with the previously generated assistant turns, so the whole conversation comes from the model",
    )
    status_interval_s: float = Field(default=10.0, gt=0, description="Status line period off a terminal")
    partitioning: PartitionSpec = Field(
        default_factory=PartitionSpec, description="How a split run divides the input between its partitions"
    )
    monitor: MonitorSpec = Field(
        default_factory=lambda: MonitorSpec(), description="Scrapes, event log, metrics exporter, doctor"
    )

    @field_validator("servers")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [normalize_url(u) for u in v]

    @model_validator(mode="after")
    def _has_servers(self) -> JobSpec:
        if not self.servers and not self.servers_file:
            raise ValueError("give servers (a list of base URLs) or servers_file")
        if self.save_token_ids and self.api == "sglang-generate" and not self.tokenizer:
            raise ValueError(
                "save_token_ids with api: sglang-generate needs a tokenizer: SGLang's /generate returns the "
                "completion's ids but not the prompt's, so tokenmill tokenises the prompt itself and sends "
                "input_ids (set tokenizer to the model's path, or use an openai-* api)"
            )
        if self.regenerate == "all":
            if self.input.conversation_turns == "history":
                raise ValueError("regenerate: all sends every user turn itself; drop input.conversation_turns: history")
            self.input.conversation_turns = "all"
        return self

    def resolved_servers(self) -> list[str]:
        """Servers from the list and the servers file, deduplicated in order."""
        urls = list(self.servers)
        if self.servers_file:
            try:
                lines = Path(self.servers_file).read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"servers_file {self.servers_file!r} cannot be read: {exc}") from exc
            for line in lines:
                line = line.split("#", 1)[0].strip()
                if line:
                    urls.append(normalize_url(line))
        seen: dict[str, None] = dict.fromkeys(urls)
        if not seen:
            raise ConfigError("no servers given: list base URLs under `servers:` or in servers_file")
        return list(seen)

    def api_key(self) -> str | None:
        """The API key from the named environment variable (never stored in the job file)."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"api_key_env names {self.api_key_env!r}, but that variable is not set; export it")
        return key


class FaultSpec(_Model):
    """Fault injection for the simulated server (fractions of requests)."""

    error_rate: float = Field(default=0.0, ge=0, le=1, description="HTTP 500 responses")
    rate_limit_rate: float = Field(default=0.0, ge=0, le=1, description="HTTP 429 responses")
    stall_rate: float = Field(default=0.0, ge=0, le=1, description="Requests that hang for stall_s")
    stall_s: float = Field(default=3600.0, ge=0, description="How long a stalled request hangs, in seconds")
    drop_rate: float = Field(default=0.0, ge=0, le=1, description="Connections closed without a response")
    malformed_rate: float = Field(default=0.0, ge=0, le=1, description="Truncated / invalid JSON bodies")
    seed: int = Field(default=0, description="Seeds which requests get a fault")


class SimConfig(_Model):
    """The simulated SGLang server: scheduler capacity, timing, output lengths and faults."""

    host: str = Field(default="127.0.0.1", description="Address to bind (loopback unless you mean otherwise)")
    port: int = Field(default=0, ge=0, le=65535, description="Port to bind; 0 picks a free one")
    model: str = Field(default="tokenmill-sim", description="Served model name (/v1/models, metric labels)")
    max_running_requests: int = Field(default=256, ge=1, description="Requests decoded at once (batch cap)")
    max_queued_requests: int | None = Field(
        default=None, ge=0, description="Waiting requests beyond this are refused with 503 (none: no cap)"
    )
    context_length: int = Field(default=32768, ge=16, description="Prompt + max_tokens limit in tokens (else 400)")
    step_base_ms: float = Field(default=20.0, ge=0, description="Decode step time at batch 1")
    step_per_req_ms: float = Field(default=0.05, ge=0, description="Extra step time per running request")
    prefill_ms_per_1k: float = Field(default=30.0, ge=0, description="Prefill time per 1,000 prompt tokens")
    time_scale: float = Field(default=1.0, ge=0, description="Multiplies every simulated duration")
    instant: bool = Field(default=False, description="Answer at once (client benchmarks)")
    output_len_mean: int = Field(default=256, ge=1, description="Mean completion length in tokens (log-normal)")
    output_len_sigma: float = Field(default=0.6, ge=0, description="Log-normal sigma of output length")
    seed: int = Field(default=0, description="Seeds output lengths and text (same seed + prompt: same answer)")
    loop_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of answers that loop (one phrase repeated until max tokens)"
    )
    empty_rate: float = Field(default=0.0, ge=0, le=1, description="Share of answers that are empty")
    unclosed_think_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of answers whose thinking block never closes (runs to max tokens)"
    )
    penalty_loop_cut: float = Field(
        default=10.0,
        ge=1,
        description="A request with a repetition, frequency or presence penalty loops this many times less often",
    )
    faults: FaultSpec = Field(default_factory=FaultSpec)
    max_total_tokens: int = Field(
        default=1_048_576, ge=1, description="KV pool size in tokens (token_usage = tokens held / this)"
    )
    decode_log_interval: int = Field(
        default=40, ge=1, description="Decode steps between decode log lines and gauge updates (as SGLang)"
    )
    api_key: str | None = Field(
        default=None, repr=False, description="Require this Bearer token (/health and /metrics stay open)"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Level of the scheduler log lines `tokenmill sim` writes to stderr"
    )
    gpu: str | None = Field(
        default=None,
        description="GPU to simulate (a planner GPU such as rtx-pro-6000): turns the twin on, with pools, "
        "admission and step times from the capacity planner instead of the fixed step times",
    )
    model_spec: str | None = Field(
        default=None,
        description="Model the twin simulates: a bundled planner model or a config.json path (none: --model)",
    )
    engine_flags: str = Field(
        default="",
        description="SGLang launch flags the twin sizes its pools and timing from, e.g. "
        "'--mamba-radix-cache-strategy extra_buffer --mem-fraction-static 0.9'",
    )
    eta_bw: float | None = Field(
        default=None, gt=0, le=1, description="Bandwidth efficiency of the twin's roofline (none: the planner's)"
    )
    flag_slowdown: str | None = Field(
        default=None,
        description="Fault injection for the twin, 'FLAG=FACTOR' (e.g. 'disable-radix-cache=3'): while its SGLang "
        "flags include FLAG, its decode steps take FACTOR times what the planner predicts, as a build whose "
        "kernels respond to that flag otherwise would; for testing that a change predicted to help is measured "
        "and rolled back",
    )


class PlannerConfig(_Model):
    """Assumptions of the capacity planner (``tokenmill plan``); docs/planner.md gives each one's source."""

    eta_bw: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Achieved fraction of peak memory bandwidth for the weight stream in decode (GB300 "
        "Qwen3.8-27B TPOTs and the published-figures table of docs/planner.md). Fit it with `tokenmill calibrate`",
    )
    eta_request_ratio: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Efficiency of the per-request traffic (recurrent state, KV, logits) as a share of eta_bw: "
        "small strided reads move slower than the weight stream, so efficiency falls as more requests run",
    )
    eta_compute: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Achieved fraction of dense tensor peak (prefill, large batches); the 8K-prompt rows of "
        "the published-figures table imply about 0.7",
    )
    t_fixed_ms: float = Field(
        default=1.0,
        ge=0,
        description="Fixed cost per decode step with CUDA graphs and the overlap scheduler (1-3 ms; the low "
        "end because the eta evidence already absorbs part of it)",
    )
    t_fixed_no_overlap_ms: float = Field(
        default=3.0, ge=0, description="Fixed cost per decode step when the overlap scheduler is off"
    )
    cuda_context_gib: float = Field(
        default=0.75, ge=0, description="GPU memory already used when SGLang measures it (CUDA context, NCCL)"
    )
    kv_target_usage: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="Share of the KV pool the steady-state running set may fill (the rest absorbs length spread)",
    )
    sglang_version: str = Field(
        default="0.5.23",
        min_length=1,
        description="The SGLang release the planner sizes for and renders flags for: it decides what "
        "`--mamba-radix-cache-strategy auto` resolves to (0.5.14 and later: extra_buffer when the model "
        "supports it; before: no_buffer) and which flag spellings a server accepts",
    )
    whatif_mem_fractions: list[float] = Field(
        default_factory=lambda: [0.85, 0.9],
        description="--mem-fraction-static values tried by the what-if table (besides the base value)",
    )
    whatif_rows_shown: int = Field(default=12, ge=1, description="What-if rows printed on a terminal (all in --json)")
    workload_prompts: int = Field(default=10000, ge=1, description="Prompt count when none is given")
    workload_input_len: int = Field(default=1024, ge=1, description="Mean prompt tokens when none is given")
    workload_output_len: int = Field(default=1024, ge=1, description="Mean completion tokens when none is given")
    dataset_sample_rows: int = Field(default=256, ge=1, description="Rows read to measure prompt lengths")
    calibrate_window_s: float = Field(default=60.0, gt=0, description="How long `calibrate --server` scrapes")
    calibrate_interval_s: float = Field(default=2.0, gt=0, description="Scrape period of `calibrate --server`")


class DoctorSpec(_Model):
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


class MonitorSpec(_Model):
    """Watching the fleet during a run: scrapes, rates, the event log, the exporter and the doctor."""

    enabled: bool = Field(default=True, description="Scrape the servers' /metrics (off: client-side numbers only)")
    scrape_interval_s: float = Field(default=3.0, ge=0.2, description="Seconds between two scrapes of a server")
    scrape_timeout_s: float = Field(default=2.0, gt=0, description="A scrape slower than this counts as failed")
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


# Launch flags --autotune may change unless a profile says otherwise: how SGLang schedules and splits its memory,
# none of which changes what the model computes or risks running out of memory under load.
TUNABLE_FLAGS = (
    "disable-radix-cache",
    "max-running-requests",
    "mamba-radix-cache-strategy",
    "mamba-scheduler-strategy",
    "disable-overlap-schedule",
    "mamba-full-memory-ratio",
    "schedule-conservativeness",
    "chunked-prefill-size",
    "enable-mixed-chunk",
    "cuda-graph-max-bs-decode",
    "cuda-graph-max-bs",
)


class AutotuneSpec(_Model):
    """What ``--autotune`` (``run --fleet F --autotune``, ``fleet tune F``) may change on a live fleet, and how it
    decides to keep a change: the doctor's confirmed headline, applied to one server (a canary), measured against
    the canary's own rate before and the other servers' meanwhile, then rolled to the rest or rolled back."""

    allow: list[str] = Field(
        default_factory=lambda: list(TUNABLE_FLAGS),
        description="Launch flags the tuner may set (names without the leading dashes). The default holds "
        "scheduling and memory-split flags only: flags that change what the model computes (mamba-ssm-dtype, "
        "kv-cache-dtype, quantization) or that can run a server out of memory under load (mem-fraction-static) "
        "are applied only when the profile names them here",
    )
    min_predicted_gain: float = Field(
        default=0.10,
        ge=0,
        description="Try a change only when the planner predicts it to raise a server's throughput by at least "
        "this share (a kept change goes to every server)",
    )
    keep_gain: float = Field(
        default=0.03,
        description="Keep a change only when its measured gain, less its uncertainty (confidence_z standard "
        "errors), is at least this share; a change measured below it is rolled back",
    )
    confidence_z: float = Field(
        default=2.0, gt=0, description="Standard errors a measured gain must clear to count as significant"
    )
    window_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds of decode rate measured before the change (the canary and the others) and after it",
    )
    max_window_s: float = Field(
        default=900.0,
        gt=0,
        description="A result not significant after window_s is measured longer, up to this; then rolled back",
    )
    sub_windows: int = Field(
        default=6, ge=3, description="Parts each window is cut into to estimate the rate's noise (batch means)"
    )
    warmup_s: float = Field(
        default=120.0,
        ge=0,
        description="After the canary is up with the change, seconds before measuring (its batch refills)",
    )
    warmup_lifetimes: float = Field(
        default=1.0,
        ge=0,
        description="...and at least this many request lifetimes (running / requests finished per second, "
        "measured on the canary before the change): a batch that started together is not yet a steady one",
    )
    min_verdict_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of the live servers the verdict must name (the change goes to every server of the fleet; "
        "a server without a queue for a moment drops out of a verdict)",
    )
    max_changes: int = Field(default=3, ge=1, description="Changes tried per run (kept or rolled back)")
    cooldown_s: float = Field(
        default=300.0, ge=0, description="Seconds after a change is rolled out or back before the next is considered"
    )
    min_remaining_s: float = Field(
        default=900.0,
        ge=0,
        description="No change is started when the run's ETA is shorter than this (it could not pay back)",
    )
    rollout_batch: int = Field(
        default=1, ge=1, description="Servers re-flagged at once when a kept change is rolled to the rest"
    )
    rollback_drain_s: float = Field(
        default=120.0,
        ge=0,
        description="Longest wait for a canary's requests to finish before it is rolled back (the profile's "
        "drain_timeout_s when shorter); what is still in flight is retried elsewhere, so a change that does not "
        "pay holds its server no longer than this",
    )
    dry_run: bool = Field(default=False, description="Say what would be changed, and change nothing")


def normalize_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; strips a trailing slash and a trailing ``/v1``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def _fix_hint(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add this field"
    if kind == "extra_forbidden":
        return "remove it or check the spelling"
    if kind in ("literal_error", "enum"):
        return "use one of the allowed values"
    return "correct the value"


def format_validation_error(exc: ValidationError, where: str) -> str:
    """One line per bad field: ``field.path: problem (fix)``."""
    lines = [f"{where} is invalid:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {loc}: {err['msg']} -> {_fix_hint(dict(err))}")
    return "\n".join(lines)


def parse_job(data: dict[str, Any], where: str = "job spec") -> JobSpec:
    """Validate a job mapping; raises ConfigError naming each bad field."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where)) from exc


def load_job(path: str | Path, overrides: dict[str, Any] | None = None) -> JobSpec:
    """Read a YAML job file, apply dotted-key overrides (``{"output.dir": "x"}``) and validate."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read job file {p}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must hold a mapping of job fields (input, servers, output, ...)")
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return parse_job(data, where=str(p))


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating levels as needed."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


FleetEngine = Literal["sglang", "vllm", "sim"]
FlagValue = str | int | float | bool | None


class WatchdogSpec(_Model):
    """When the fleet restarts a server that is alive but hung (a stuck scheduler, a wedged collective)."""

    enabled: bool = Field(default=True, description="Watch every healthy server for a hang")
    interval_s: float = Field(default=10.0, gt=0, description="Seconds between two looks at a server")
    probe_timeout_s: float = Field(
        default=10.0, gt=0, description="A health probe that gets no answer within this counts as timed out"
    )
    probe_failures: int = Field(
        default=3, ge=1, description="Health probes timing out in a row after which the server is restarted"
    )
    stall_s: float = Field(
        default=300.0,
        ge=0,
        description="Restart a server whose generated-token counter has not moved for this long while it holds "
        "running requests (SGLang's live decode counter, else generation_tokens_total); 0: never",
    )


class FleetProfile(_Model):
    """A fleet of inference servers (``tokenmill fleet``): engine, model, flags, GPUs and layout, ports, restarts.

    Each server runs the engine's command template with its own ``CUDA_VISIBLE_DEVICES`` (``tp_size``
    consecutive GPUs of ``gpus``), its own port and its log in ``state_dir``.
    """

    engine: FleetEngine = Field(description="sglang, vllm, or sim (tokenmill's simulated SGLang server)")
    model: str = Field(description="Model path or Hub id given to every server (sim: the served model name)")
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Engine flags for every server, e.g. {mem-fraction-static: 0.9}; true: a bare --flag; "
        "false or null: left out",
    )
    extra_args: list[str] = Field(default_factory=list, description="Arguments appended verbatim after the flags")
    command: str | None = Field(
        default=None,
        description="Command template; placeholders {python} {model} {host} {port} {tp} {gpus} {index} {flags} "
        "(default: the engine's own launch command)",
    )
    python: str | None = Field(
        default=None, description="Interpreter that runs the engine (default: the one running tokenmill)"
    )
    sglang_version: str | None = Field(
        default=None,
        description="SGLang release of the engine, which decides the spelling of renamed flags "
        "(--mamba-radix-cache-strategy / --mamba-scheduler-strategy); unset: read from the engine's Python",
    )
    env: dict[str, str | None] = Field(
        default_factory=dict, description="Environment of every server: a value sets a variable, null removes it"
    )
    gpus: list[int] | int = Field(
        default=1, description="GPU ids to use (a number N means 0..N-1); one server per tp_size GPUs"
    )
    tp_size: int = Field(default=1, ge=1, description="GPUs per server (tensor parallelism)")
    host: str = Field(default="127.0.0.1", description="Address each server binds (0.0.0.0 to serve other hosts)")
    base_port: int = Field(
        default=30000, ge=0, le=65535, description="Server i listens on base_port + i; 0 picks free ports"
    )
    health_path: str = Field(default="/health", description="Path that answers 200 once a server is ready")
    start_timeout_s: float = Field(
        default=900.0, gt=0, description="How long a server may take to become healthy (large models load slowly)"
    )
    stop_timeout_s: float = Field(default=30.0, gt=0, description="Grace after SIGTERM before SIGKILL")
    max_restarts: int = Field(
        default=5, ge=0, description="Restarts in a row after crashes before a server is given up"
    )
    restart_backoff_s: float = Field(default=2.0, ge=0, description="Wait before the first restart; doubles each time")
    restart_backoff_max_s: float = Field(default=60.0, ge=0, description="Longest wait between two restarts")
    restart_reset_s: float = Field(
        default=300.0, gt=0, description="A server up this long has its count of restarts in a row reset"
    )
    autotune: AutotuneSpec = Field(
        default_factory=AutotuneSpec,
        description="What `run --fleet --autotune` and `fleet tune` may change, and how a change is measured",
    )
    drain_timeout_s: float = Field(
        default=300.0, ge=0, description="Rolling re-flag: longest wait for a server's requests to finish"
    )
    drain_notice_s: float = Field(
        default=2.0, ge=0, description="Rolling re-flag: time the clients get to notice a drain before idle counts"
    )
    state_dir: str = Field(
        default="tokenmill-fleet", description="Directory for the endpoints file, state file and server logs"
    )
    log_tail_lines: int = Field(default=30, ge=1, description="Log lines quoted when a server fails")
    watchdog: WatchdogSpec = Field(
        default_factory=WatchdogSpec,
        description="Restarting a hung server: its health probe times out, or it generates nothing while it has "
        "running requests; runs retry its requests elsewhere without spending their attempts",
    )

    @field_validator("gpus")
    @classmethod
    def _gpu_list(cls, v: list[int] | int) -> list[int]:
        ids = list(range(v)) if isinstance(v, int) else list(v)
        if not ids:
            raise ValueError("give at least one GPU id (or a count)")
        if len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError("GPU ids must be distinct and not negative")
        return ids

    @model_validator(mode="after")
    def _layout(self) -> FleetProfile:
        gpus = self.gpu_ids()
        if len(gpus) % self.tp_size:
            raise ValueError(f"{len(gpus)} GPUs do not split into groups of tp_size={self.tp_size}")
        if self.base_port and self.base_port + self.servers() - 1 > 65535:
            raise ValueError("base_port + number of servers goes past port 65535")
        return self

    def gpu_ids(self) -> list[int]:
        """The GPU ids as a list (the validator has normalised a count already)."""
        return list(range(self.gpus)) if isinstance(self.gpus, int) else list(self.gpus)

    def servers(self) -> int:
        """How many servers the layout makes."""
        return len(self.gpu_ids()) // self.tp_size

    def gpu_groups(self) -> list[tuple[int, ...]]:
        """The GPUs of each server, in server order."""
        ids = self.gpu_ids()
        return [tuple(ids[i : i + self.tp_size]) for i in range(0, len(ids), self.tp_size)]


def load_profile(path: str | Path) -> FleetProfile:
    """Read and validate a YAML fleet profile; raises ConfigError naming each bad field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read fleet profile {p}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must hold a mapping of fleet fields (engine, model, flags, gpus, ...)")
    try:
        return FleetProfile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(p))) from exc
