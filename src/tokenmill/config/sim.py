"""The simulated SGLang server's settings: scheduler capacity, timing, output lengths, degenerate answers, faults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenmill.config.base import Model


class FaultSpec(Model):
    """Fault injection for the simulated server (fractions of requests)."""

    error_rate: float = Field(default=0.0, ge=0, le=1, description="HTTP 500 responses")
    rate_limit_rate: float = Field(default=0.0, ge=0, le=1, description="HTTP 429 responses")
    stall_rate: float = Field(default=0.0, ge=0, le=1, description="Requests that hang for stall_s")
    stall_s: float = Field(default=3600.0, ge=0, description="How long a stalled request hangs, in seconds")
    drop_rate: float = Field(default=0.0, ge=0, le=1, description="Connections closed without a response")
    malformed_rate: float = Field(default=0.0, ge=0, le=1, description="Truncated / invalid JSON bodies")
    seed: int = Field(default=0, description="Seeds which requests get a fault")


class SimSpec(Model):
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
    max_lag_s: float = Field(
        default=1.0,
        gt=0,
        description="Wall seconds the virtual clock may fall behind and still catch up (steps run back to back); "
        "beyond it the lag is dropped: a starved simulator runs slower, its decisions unchanged",
    )
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
    thinking: bool = Field(
        default=False,
        description="Answer like a thinking model: a <think> block of reasoning before the answer, unless the request "
        "turns it off (chat_template_kwargs.enable_thinking: false, or a prompt ending in an empty thinking block)",
    )
    thinking_switch: bool = Field(
        default=True,
        description="With thinking: the model's chat template honours enable_thinking; false: it thinks whatever "
        "the request says (a thinking-only model, or a chat template without the switch)",
    )
    reasoning_share: float = Field(
        default=0.6, gt=0, lt=1, description="With thinking: the share of an answer's tokens spent reasoning"
    )
    reasoning_parser: Literal["qwen3", "qwen3-thinking", "deepseek-r1"] | None = Field(
        default=None,
        description="SGLang's --reasoning-parser: chat answers come back with the reasoning in reasoning_content "
        "(qwen3: unless enable_thinking is false; qwen3-thinking, deepseek-r1: always, everything before </think>); "
        "without it the thinking stays inline in content, as SGLang returns it",
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
