"""The capacity planner's assumptions (``tokenmill plan``, the twin, the doctor's predictions)."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model


class PlannerSpec(Model):
    """Assumptions of the capacity planner (``tokenmill plan``); docs/planner.md gives each one's source."""

    eta_bw: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Achieved fraction of peak memory bandwidth for the weight stream in decode (GB300 "
        "Qwen3.8-27B TPOTs and the published-figures table of docs/planner.md). Fit it with `tokenmill calibrate`",
    )
    eta_bw_gddr_ratio: float = Field(
        default=1.2,
        gt=0,
        description="Bandwidth efficiency of a GDDR card (GDDR6/6X/7) as a multiple of eta_bw, which is fitted on HBM "
        "cards: on one vLLM harness at one release the GDDR7 RTX 5090 decodes at 0.88 of its peak where the HBM2e "
        "A100 reaches 0.73, and GDDR6/6X cards beat HBM ones by 1.15-1.27x at another (docs/planner.md, "
        "'Memory technology'); capped at 1",
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
    oom_risk_high: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="A change that leaves outside the static pools less than this share of SGLang's own reserve "
        "estimate (activations, CUDA graphs) is called a high out-of-memory risk; below the whole estimate, moderate",
    )
    whatif_rows_shown: int = Field(default=12, ge=1, description="What-if rows printed on a terminal (all in --json)")
    workload_prompts: int = Field(default=10000, ge=1, description="Prompt count when none is given")
    workload_input_len: int = Field(default=1024, ge=1, description="Mean prompt tokens when none is given")
    workload_output_len: int = Field(default=1024, ge=1, description="Mean completion tokens when none is given")
    workload_output_sigma: float = Field(
        default=0.8,
        gt=0,
        description="Log-normal sigma of completion lengths (`plan --train-max-length`: how long the tail is; "
        "answers of a chat model regenerated at a generous max_tokens have a long one)",
    )
    dataset_sample_rows: int = Field(default=256, ge=1, description="Rows read to measure prompt lengths")
    calibrate_window_s: float = Field(default=60.0, gt=0, description="How long `calibrate --server` scrapes")
    calibrate_interval_s: float = Field(default=2.0, gt=0, description="Scrape period of `calibrate --server`")
