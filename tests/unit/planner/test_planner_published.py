"""The planner against published throughput figures for the bundled models and GPUs.

Most rows are measurements SGLang published (cookbook benchmark tables in sgl-project/sglang), with their
source, the server's launch flags and SGLang release, and the benchmark's workload. The GDDR rows come from
one vLLM harness (AccelMark) that ran the same model and workloads on a GDDR7 RTX 5090 and an HBM2e A100,
so the two cards' errors can be compared like for like. The planner is run on
the same setup and its output tokens/s per GPU compared with the published one. The target is 10 %; rows
the model does not reach carry the band their error stays in and the reason (docs/planner.md, "Published
figures"), so a change that moves them fails here too. The table in docs/planner.md is checked against
these rows.

The cookbook benchmarks run ``sglang.bench_serving`` on the random dataset with fixed lengths
(``--random-range-ratio 1``), a cold cache (``--flush-cache``) and a client concurrency cap: the planner's
workload is that many prompts of those lengths (the concurrency caps the running requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tokenmill.config import PlannerSpec
from tokenmill.planner import GpuCatalog, Workload, load_model, parse_flags, plan

QWEN36 = (
    "sgl-project/sglang docs/src/snippets/configs/Qwen/qwen3.6-benchmarks.jsx "
    "@ ec170fd9e5e8872979d6acc0cff93ad0fa54d4a6 (cookbook Qwen3.6; launch flags from qwen3.6.jsx, same commit)"
)
QWEN38 = (
    "sgl-project/sglang docs/src/snippets/configs/Qwen/qwen3.8-27b-benchmarks.jsx "
    "@ 3440ccb5698719307dd02100ae7d8849cd2b6289 (cookbook Qwen3.8-27B)"
)
ACCELMARK = "FreedomIntelligence/AccelMark @ 5797fc42745be2494e6213938d9e5afa0c6c5bef results/verified/"
TARGET = 0.10


@dataclass(frozen=True)
class Published:
    """One published throughput figure and the setup it was measured on."""

    label: str
    source: str
    model: str  # bundled planner model
    gpu: str
    flags: str  # the server's launch flags the planner models (others, e.g. --attention-backend, are listed unmodeled)
    sglang_version: str  # "dev": a development build (the newest rules)
    input_len: int
    output_len: int
    concurrency: int  # bench_serving --max-concurrency
    value: float  # as published
    total_tokens: bool  # the value counts input + output tokens per GPU (the Qwen3.6 table), else output only
    engine: str = "SGLang"  # the engine that measured it; the planner plans with sglang_version's rules
    max_tokens: int | None = None  # the requests' limit when it is not the mean output
    band: tuple[float, float] | None = None  # for a row outside the target: the error range it is known to sit in
    why: str = ""

    @property
    def output_tok_s_per_gpu(self) -> float:
        if self.total_tokens:  # qwen3.6-benchmarks.jsx: tokens_per_sec_per_gpu = output_throughput / tp * (isl+osl)/osl
            return self.value * self.output_len / (self.input_len + self.output_len)
        return self.value


def _qwen36_ht(gpu: str, variant: str, quant: str, value: float, version: str, flags: str) -> Published:
    model = "qwen3.6-27b" if variant == "27b" else "qwen3.6-35b-a3b"
    quantization = " --quantization fp8" if quant == "fp8" else ""
    return Published(
        label=f"Qwen3.6-{variant.upper()} {quant} {gpu} HT c1024",
        source=QWEN36,
        model=model,
        gpu=gpu,
        flags=flags + quantization,
        sglang_version=version,
        input_len=8192,
        output_len=1024,
        concurrency=1024,
        value=value,
        total_tokens=True,
    )


BLACKWELL_HT = "--attention-backend trtllm_mha --mem-fraction-static 0.8"
FP8_ON_DEV_GB300 = (
    "Qwen3.8-27B-FP8 (a private checkpoint) on a development build on GB300: FP8 is 1.26x BF16 at concurrency 1, "
    "where the weight bytes shrink 1.9x, and slower than BF16 at 64; no FP8 term fits these rows without "
    "breaking the Qwen3.6 FP8 rows"
)
H100_PER_REQUEST = (
    "the measured TPOT (20.0 ms with 46+ requests decoding) is below what the per-request traffic allows at the "
    "Blackwell-derived efficiency (28.9 ms at 58): Hopper moves state and KV faster; calibrate eta on Hopper"
)

SGLANG_ROWS: tuple[Published, ...] = (
    # high-throughput cells: no speculative decoding; random 8192 in / 1024 out; concurrency 1024, 2048 prompts
    _qwen36_ht("h200", "35b-a3b", "bf16", 21029, "0.5.16", "--mem-fraction-static 0.92"),
    _qwen36_ht("h200", "35b-a3b", "fp8", 30201, "0.5.16", "--mem-fraction-static 0.8"),
    _qwen36_ht("b200", "35b-a3b", "bf16", 38134, "0.5.15", BLACKWELL_HT),
    _qwen36_ht("b200", "35b-a3b", "fp8", 46963, "0.5.15", BLACKWELL_HT),
    _qwen36_ht("b200", "27b", "bf16", 12154, "0.5.15", BLACKWELL_HT),
    _qwen36_ht("b200", "27b", "fp8", 16229, "0.5.15", BLACKWELL_HT),
    _qwen36_ht("b300", "35b-a3b", "bf16", 49190, "0.5.16", BLACKWELL_HT),
    _qwen36_ht("b300", "35b-a3b", "fp8", 54080, "0.5.16", BLACKWELL_HT),
    _qwen36_ht("b300", "27b", "bf16", 14272, "0.5.16", BLACKWELL_HT),
    _qwen36_ht("b300", "27b", "fp8", 18327, "0.5.16", BLACKWELL_HT),
    Published(
        label="Qwen3.6-35B-A3B fp8 h100 HT c1024",
        source=QWEN36,
        model="qwen3.6-35b-a3b",
        gpu="h100",
        flags="--mem-fraction-static 0.9 --max-running-requests 512 --chunked-prefill-size 16384 --quantization fp8",
        sglang_version="0.5.16",
        input_len=8192,
        output_len=1024,
        concurrency=1024,
        value=20603,
        total_tokens=True,
        band=(-0.25, -0.10),
        why=H100_PER_REQUEST,
    ),
    # "balanced" cells (no speculative decoding), random 1024 in / 1024 out, 64/64/256 prompts; the rows are bound
    # by the client concurrency (1/16/64), far below the server's max running, so the pool flags do not matter.
    # Qwen3.8-27B has the bundled Qwen3.6-27B's geometry (docs/reference/hardware.md §2.1) and architecture.
    *(
        Published(
            label=f"Qwen3.8-27B {quant} gb300 c{conc}",
            source=QWEN38,
            model="qwen3.6-27b",
            gpu="gb300",
            flags="--quantization fp8" if quant == "fp8" else "",
            sglang_version="dev",
            input_len=1024,
            output_len=1024,
            concurrency=conc,
            value=value,
            total_tokens=False,
            band=(0.25, 0.45) if quant == "fp8" else None,
            why=FP8_ON_DEV_GB300 if quant == "fp8" else "",
        )
        for quant, values in (("bf16", (97, 1235, 3208)), ("fp8", (121, 1355, 3012)))
        for conc, value in zip((1, 16, 64), values, strict=True)
    ),
)


# AccelMark's vLLM runner: max_num_seqs 512, gpu_memory_utilization 0.9, greedy, max_tokens 512 (suite A) or
# 256 (suite D); TP 1, BF16. Suite A: the first 100 ShareGPT prompts of sharegpt_standard_v1, 245 tokens on
# average plus ~10 of the Llama-3 chat template; the answers' mean (343) is what the measured input/output
# throughput ratio (0.743, the same on both cards) gives. Suite D: ~28.6K-token prompts, 256-token answers.
VLLM_FLAGS = "--max-running-requests 512 --mem-fraction-static 0.9"
SUITE_A = {"model": "llama-3.1-8b", "input_len": 255, "output_len": 343, "max_tokens": 512}
SUITE_D = {"model": "llama-3.1-8b", "input_len": 28639, "output_len": 256, "max_tokens": 256}
LONG_PROMPTS = (
    "99 % of the work is the 28.6K-token prefills (50 at once, ~3 resident on the 5090, ~15 on the A100): a "
    "prefill figure, not a decode one. Both cards are under-predicted; the planner adds each request's prefill "
    "and decode in series where vLLM's chunked prefill runs decode tokens inside the prefill steps, which costs "
    "most where few requests fit. The 5090's further gap is its compute: the catalog's 209.5 TFLOP/s is the "
    "FP32-accumulate rate"
)
SMALL_BATCH_HBM = (
    "a closed loop of 8 runs far from the batch sizes eta is fitted at; vLLM 0.20 streams the A100's weights at "
    "0.73 of peak at one request (10.77 ms TPOT) against the default 0.70"
)


RTX5090 = (
    "rtx-5090",
    "vLLM 0.19.1",
    "nvidia_geforce_rtx_5090x1_suite_{}_nvidia_vllm_47f5d58e_{}",
    {"A": "b8f8ed0f", "D": "e87e6c36"},
)
A100 = (
    "a100-80gb",
    "vLLM 0.20.1",
    "nvidia_a100_sxm4_80gbx1_suite_{}_nvidia_vllm020_0f6c56e4_{}",
    {"A": "8f83bfab", "D": "43e96189"},
)
Card = tuple[str, str, str, dict[str, str]]


def _accelmark(
    card: Card, what: str, scenario: str, suite: str, concurrency: int, value: float, **kw: object
) -> Published:
    """One AccelMark run: ``card``'s result of ``scenario`` in ``suite`` (A: ShareGPT, D: long prompts)."""
    gpu, engine, run, ids = card
    model = "Llama-3-8B" if suite == "A" else "Llama-3.1-8B"
    return Published(
        label=f"{model} bf16 {gpu} vLLM {what}",
        source=ACCELMARK + run.format(suite, ids[suite]) + f"/{scenario}",
        gpu=gpu,
        flags=VLLM_FLAGS,
        sglang_version="0.5.23",
        concurrency=concurrency,
        value=value,
        total_tokens=False,
        engine=engine,
        **(SUITE_A if suite == "A" else SUITE_D),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# each scenario on both cards: (what, scenario, suite, concurrency, RTX 5090's output tok/s, A100's, bands by card)
# offline: all prompts submitted at once (LLM.generate); sustained: a 30-minute closed loop holding 8 in flight (its
# mean); interactive: one request at a time, an answer's tokens over its TTFT + (answer - 1) x TPOT (the p50s)
SCENARIOS: tuple[tuple[str, str, str, int, float, float, dict[str, tuple[tuple[float, float], str]]], ...] = (
    ("100 at once", "offline", "A", 100, 3485.86, 3871.19, {}),
    ("closed loop c8", "sustained", "A", 8, 707.5, 712.3, {"a100-80gb": ((-0.15, -0.10), SMALL_BATCH_HBM)}),
    (
        "one at a time",
        "interactive",
        "A",
        1,
        round(343 / (0.0303 + 342 * 0.01022), 1),
        round(343 / (0.02778 + 342 * 0.01077), 1),
        {},
    ),
    (
        "28.6K prompts",
        "offline",
        "D",
        50,
        54.26,
        65.15,
        {"rtx-5090": ((-0.35, -0.20), LONG_PROMPTS), "a100-80gb": ((-0.18, -0.08), LONG_PROMPTS)},
    ),
)


def _gddr_rows() -> tuple[Published, ...]:
    rows = []
    for what, scenario, suite, conc, v5090, va100, bands in SCENARIOS:
        for card, value in ((RTX5090, v5090), (A100, va100)):
            band, why = bands.get(card[0], (None, ""))
            rows.append(_accelmark(card, what, scenario, suite, conc, value, band=band, why=why))
    return tuple(rows)


GDDR_ROWS = _gddr_rows()
ROWS = SGLANG_ROWS + GDDR_ROWS


def predicted(row: Published, config: PlannerSpec | None = None) -> float:
    """The planner's output tokens/s per GPU for ``row``'s setup."""
    cfg = (config or PlannerSpec()).model_copy(update={"sglang_version": row.sglang_version})
    workload = Workload(
        prompts=row.concurrency,
        input_len=row.input_len,
        output_len=row.output_len,
        max_tokens=row.max_tokens,
        ignore_eos=row.max_tokens == row.output_len,
    )
    result = plan(load_model(row.model), GpuCatalog.load().get(row.gpu), parse_flags(row.flags), workload, cfg)
    return result.tok_s_per_gpu


def error(row: Published) -> float:
    return predicted(row) / row.output_tok_s_per_gpu - 1


@pytest.mark.parametrize("row", [r for r in ROWS if r.band is None], ids=lambda r: r.label)
def test_within_ten_percent_of_the_published_figure(row: Published) -> None:
    assert abs(error(row)) <= TARGET, f"{row.label}: {error(row):+.1%} ({row.source})"


@pytest.mark.parametrize("row", [r for r in ROWS if r.band is not None], ids=lambda r: r.label)
def test_rows_outside_the_target_stay_in_their_explained_band(row: Published) -> None:
    low, high = row.band or (0.0, 0.0)
    assert row.why
    assert low <= error(row) <= high, f"{row.label}: {error(row):+.1%} left its band {row.band}"


def test_most_rows_are_within_the_target() -> None:
    within = [r for r in ROWS if abs(error(r)) <= TARGET]
    assert len(within) >= 18 and len(ROWS) == 25


def test_every_gddr7_decode_row_is_within_the_target() -> None:
    decode = [r for r in GDDR_ROWS if GpuCatalog.load().get(r.gpu).memory == "gddr7" and r.band is None]
    assert len(decode) == 3
    assert all(abs(error(r)) <= TARGET for r in decode)


def test_the_memory_technology_is_what_brings_the_gddr7_rows_in() -> None:
    # planned at the HBM-fitted efficiency, the GDDR7 card's closed-loop and one-at-a-time rows are 20 % low,
    # while the HBM2e card measured on the same harness is unchanged: the term is needed, not incidental
    hbm_only = PlannerSpec(eta_bw_gddr_ratio=1.0)
    for label in ("Llama-3-8B bf16 rtx-5090 vLLM closed loop c8", "Llama-3-8B bf16 rtx-5090 vLLM one at a time"):
        row = next(r for r in ROWS if r.label == label)
        assert predicted(row, hbm_only) / row.output_tok_s_per_gpu - 1 < -TARGET
        assert abs(error(row)) <= TARGET
    a100 = next(r for r in ROWS if r.label == "Llama-3-8B bf16 a100-80gb vLLM one at a time")
    assert predicted(a100, hbm_only) == pytest.approx(predicted(a100))


def test_the_per_request_efficiency_is_what_brings_the_large_batch_rows_in() -> None:
    # with per-request traffic at the weight stream's efficiency, the state- and KV-heavy high-throughput rows
    # are over-predicted: the model change is needed, not incidental
    flat = PlannerSpec(eta_request_ratio=1.0)
    row = next(r for r in ROWS if r.label == "Qwen3.6-27B bf16 b300 HT c1024")
    assert predicted(row, flat) / row.output_tok_s_per_gpu - 1 > TARGET
    assert abs(error(row)) <= TARGET


def test_the_docs_table_is_current() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "planner.md").read_text(encoding="utf-8")
    for row in ROWS:
        line = next((ln for ln in docs.splitlines() if ln.startswith(f"| {row.label} |")), None)
        assert line is not None, f"docs/planner.md lacks the row {row.label}"
        assert f"{error(row) * 100:+.1f} %" in line, f"{row.label}: docs say {line!r}, now {error(row):+.1%}"
