"""A fleet profile (``tokenmill fleet``): engine, model, flags, GPUs, restarts, the watchdog and autotune."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.config.base import Model, format_validation_error, local_path, read_mapping
from tokenmill.errors import ConfigError

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


class AutotuneSpec(Model):
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
    allow_output_changes: list[str] = Field(
        default_factory=list,
        description="Launch flags that change the model's outputs (quantization, kv-cache-dtype, mamba-ssm-dtype, "
        "dtype, lossy speculative thresholds: tokenmill.doctor.outputs) the tuner may try; names without the "
        "leading dashes. Empty by default: a drafter corpus is worth the target model's own answers, so such a "
        "change is never tried unless named here (naming it in allow alone is not enough)",
    )
    max_memory_risk: Literal["low", "moderate", "high"] = Field(
        default="moderate",
        description="Try a change that touches memory only when its out-of-memory risk (what it leaves outside "
        "the static pools against SGLang's own reserve estimate; planner.oom_risk_high) is at most this",
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


FleetEngine = Literal["sglang", "vllm", "sim"]


FlagValue = str | int | float | bool | None


class WatchdogSpec(Model):
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


class FleetSpec(Model):
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
    reasoning_parser: str | None = Field(
        default=None,
        description="The engine's reasoning parser, rendered as --reasoning-parser NAME (SGLang: qwen3, "
        "deepseek-r1, ...; vLLM: qwen3, deepseek_r1, ...; the simulated server: qwen3, qwen3-thinking, deepseek-r1): "
        "a thinking model's reasoning then comes back in reasoning_content instead of inline in the answer "
        "(vLLM before 0.10 also needs flags: {enable-reasoning: true})",
    )
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

    @field_validator("state_dir")
    @classmethod
    def _local_state(cls, v: str) -> str:
        return local_path(v, "state_dir", "the fleet's state (endpoints, state file, server logs) stays here")

    @model_validator(mode="after")
    def _one_parser(self) -> FleetSpec:
        if self.reasoning_parser and any(name.lstrip("-") == "reasoning-parser" for name in self.flags):
            raise ValueError("give the reasoning parser once: reasoning_parser or flags: {reasoning-parser: ...}")
        return self

    @model_validator(mode="after")
    def _layout(self) -> FleetSpec:
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


def load_profile(path: str | Path) -> FleetSpec:
    """Read and validate a YAML fleet profile; raises ConfigError naming each bad field."""
    p = Path(path)
    data = read_mapping(p, "fleet profile", "fleet fields (engine, model, flags, gpus, ...)")
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(p))) from exc
