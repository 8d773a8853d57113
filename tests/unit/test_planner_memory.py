"""SGLang pool sizing, pinned to cases computed by hand from the reference formulas.

Formulas: sglang.md §2.3 (budget split, max-running clamp, S per strategy) and §1.3 (automatic
--mem-fraction-static); hardware.md §3.4-§5. Each case states its arithmetic.
"""

from __future__ import annotations

import math

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.catalog import load_model
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GIB, GpuCatalog, GpuSpec
from tokenmill.planner.memory import (
    DoesNotFitError,
    PoolPlan,
    auto_mem_fraction_static,
    resolve_strategy,
    size_pools,
)
from tokenmill.planner.models import weight_bytes

QWEN27 = load_model("qwen3.6-27b")
SLOT_27B = 153_944_064  # hardware.md §3.2, fp32 SSM
KV_27B = 65_536  # hardware.md §3.1, bf16

# A 96 GiB GPU with nothing used before SGLang measures, at --mem-fraction-static 0.9:
#   weights (bf16, text + vision) = 27,355,639,808 params x 2 B = 54,711,279,616 B
#   rest = 96 GiB x 0.9 - weights = 92,771,293,593.6 - 54,711,279,616 = 38,060,013,977 B
#   ratio slots K = floor(rest x 0.9/1.9 / slot) = floor(18,028,427,673 / 153,944,064) = 117
#   KV = rest - 117 x slot = 20,048,558,489 B -> floor(/65,536) = 305,916 tokens
GPU_96 = GpuSpec(key="test-96", name="test 96 GiB", memory_mib=96 * 1024, bandwidth_gbs=1000, bf16_tflops=100)
REST_96 = 38_060_013_977


def pools(flags: str, gpu: GpuSpec = GPU_96, model: str = "qwen3.6-27b", auto: str = "extra_buffer") -> PoolPlan:
    return size_pools(load_model(model), gpu, parse_flags(flags), cuda_context_gib=0.0, auto_strategy=auto)


def test_rest_is_available_times_fraction_minus_weights() -> None:
    assert weight_bytes(QWEN27).resident == 54_711_279_616
    p = pools("--mem-fraction-static 0.9")
    assert int(p.rest_gib * GIB) == REST_96
    assert p.weights_gib == pytest.approx(50.954, abs=1e-3)


def test_extra_buffer_with_overlap_holds_five_slots_per_request() -> None:
    # S = 3 + 2 (sglang.md §2.3); max running = 117 // 5 = 23
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (117, 5, 23)
    assert p.kv_tokens == 305_916
    assert p.strategy.overlap and p.max_running_source == "state slots // 5"


def test_no_buffer_holds_three_and_turns_overlap_off() -> None:
    # S = 3; 117 // 3 = 39; the radix cache with no_buffer disables the overlap scheduler (sglang.md §1.2)
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (117, 3, 39)
    assert not p.strategy.overlap


def test_extra_buffer_without_overlap_holds_four() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer --disable-overlap-schedule")
    assert (p.slots_per_request, p.max_running) == (4, 29)  # 3 + 1; 117 // 4


def test_extra_buffer_lazy_holds_four_under_its_new_flag_name() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-radix-cache-strategy extra_buffer_lazy")
    assert (p.strategy.strategy, p.slots_per_request, p.max_running) == ("extra_buffer_lazy", 4, 29)


def test_skip_decode_lock_lowers_the_base_by_one() -> None:
    # hardware.md §3.4: SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 makes extra_buffer 5 -> 4; no_buffer stays 3
    p = pools("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 --mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer")
    assert p.slots_per_request == 4
    q = pools("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 --mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer")
    assert q.slots_per_request == 3


def test_radix_off_with_max_running_sizes_the_state_pool_exactly() -> None:
    # handle_max_mamba_cache rule b: slots = 100; KV = rest - 100 x slot = 22,665,607,577 B -> 345,849 tokens
    p = pools("--mem-fraction-static 0.9 --disable-radix-cache --max-running-requests 100")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (100, 1, 100)
    assert p.kv_tokens == (REST_96 - 100 * SLOT_27B) // KV_27B == 345_849
    assert p.mamba_slots_source.startswith("--max-running-requests")


def test_radix_off_without_max_running_uses_the_ratio_and_one_slot() -> None:
    p = pools("--mem-fraction-static 0.9 --disable-radix-cache")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (117, 1, 117)


def test_explicit_max_mamba_cache_size_wins() -> None:
    # rule a: 200 slots; KV = rest - 200 x slot = 7,271,201,177 B -> 110,949 tokens; 200 // 5 = 40
    p = pools("--mem-fraction-static 0.9 --max-mamba-cache-size 200 --mamba-scheduler-strategy extra_buffer")
    assert (p.mamba_slots, p.max_running, p.kv_tokens) == (200, 40, 110_949)


def test_explicit_max_running_below_the_state_bound_is_kept() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer --max-running-requests 16")
    assert (p.max_running, p.max_running_source) == (16, "--max-running-requests")


def test_full_memory_ratio_moves_the_split() -> None:
    # r = 0.5: K = floor(rest x 0.5/1.5 / slot) = floor(12,686,671,325 / 153,944,064) = 82
    p = pools("--mem-fraction-static 0.9 --mamba-full-memory-ratio 0.5")
    assert p.mamba_slots == 82
    assert p.kv_tokens == (REST_96 - 82 * SLOT_27B) // KV_27B


def test_max_total_tokens_and_page_size_cap_the_kv_pool() -> None:
    assert pools("--mem-fraction-static 0.9 --max-total-tokens 100000").kv_tokens == 100_000
    assert pools("--mem-fraction-static 0.9 --page-size 64").kv_tokens == 305_916 // 64 * 64


def _worked_split_gpu() -> GpuSpec:
    """A GPU whose rest is 50 GiB (to within 1 MiB) for Qwen3.5-35B-A3B bf16 at mfs 0.9."""
    weights = weight_bytes(load_model("qwen3.5-35b-a3b")).resident
    mib = math.ceil((50 * GIB + weights) / 0.9 / (1 << 20))
    return GpuSpec(key="split", name="split", memory_mib=mib, bandwidth_gbs=1000, bf16_tflops=100)


@pytest.mark.parametrize(
    ("flags", "slots", "max_running", "kv_tokens"),
    [
        # sglang.md §2.3 "Worked split (illustrative)": rest = 50 GiB, Qwen3.5-35B-A3B, TP=1, fp32 SSM
        ("--mamba-scheduler-strategy no_buffer", 394, 131, 1.38e6),
        ("--mamba-scheduler-strategy extra_buffer", 394, 78, 1.38e6),
        ("--disable-radix-cache", 394, 394, 1.38e6),
        ("--disable-radix-cache --max-running-requests 512", 512, 512, 1.01e6),
        ("--disable-radix-cache --max-running-requests 512 --mamba-ssm-dtype bfloat16", 512, 512, 1.80e6),
    ],
)
def test_reference_worked_split(flags: str, slots: int, max_running: int, kv_tokens: float) -> None:
    p = pools(f"--mem-fraction-static 0.9 {flags}", gpu=_worked_split_gpu(), model="qwen3.5-35b-a3b")
    assert p.rest_gib == pytest.approx(50.0, abs=1e-3)
    assert p.mamba_slots == slots
    assert p.max_running == max_running
    assert p.kv_tokens == pytest.approx(kv_tokens, rel=0.01)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        # reserved = 512 + 1.5 x 8192 + 2 x 256 + 1/8 x 1024 = 13,440 MiB; (97,887 - 13,440) / 97,887 = 0.8627
        ("rtx-pro-6000", 0.863),
        # 141 GiB < 160: same reserve; (144,384 - 13,440) / 144,384 = 0.9069
        ("h200", 0.907),
        # 179 GiB: chunk 16,384, graph 512: 512 + 24,576 + 1,024 + 128 = 26,240; (183,296 - 26,240) / 183,296
        ("b200", 0.857),
        # 24 GiB: chunk 2048, graph 24, no 10 GiB floor: 512 + 3,072 + 48 + 128 = 3,760; (24,576 - 3,760) / 24,576
        ("rtx-4090", 0.847),
    ],
)
def test_automatic_mem_fraction_static(gpu: str, expected: float) -> None:
    card = GpuCatalog.load().get(gpu)
    assert auto_mem_fraction_static(card.memory_mib, parse_flags("")) == expected


def test_ten_gib_floor_on_large_gpus() -> None:
    # 80 GiB with chunked prefill 2048: 512 + 3,072 + 512 + 128 = 4,224 MiB < 10 GiB floor -> 0.875
    assert auto_mem_fraction_static(80 * 1024, parse_flags("--chunked-prefill-size 2048")) == 0.875


def test_auto_strategy_follows_the_build() -> None:
    flags = parse_flags("")
    assert resolve_strategy(QWEN27, flags, "extra_buffer").strategy == "extra_buffer"
    assert resolve_strategy(QWEN27, flags, "no_buffer").strategy == "no_buffer"
    # newer builds pick no_buffer when the overlap scheduler is off
    assert resolve_strategy(QWEN27, parse_flags("--disable-overlap-schedule"), "extra_buffer").strategy == "no_buffer"


def test_transformers_have_no_state_pool() -> None:
    p = pools("--mem-fraction-static 0.9", model="llama-3.1-8b")
    # weights = 8,029,995,008 params x 2 B = 16,059,990,016 B; rest = 92,771,293,593 - weights = 76,711,303,577 B
    # all of it is KV at 128 KiB a token: 585,260 tokens
    assert weight_bytes(load_model("llama-3.1-8b")).resident == 16_059_990_016
    assert p.mamba_slots == 0 and p.slots_per_request == 0
    assert p.kv_tokens == 585_260
    # auto max running: clamp(585,260 / 131,072 (context) x 512, 2048, 4096) = 2286; tokens // 2 is larger
    assert (p.max_running, p.max_running_source) == (2286, "SGLang auto (KV tokens / context length)")


def test_tp_divides_weights_and_state() -> None:
    one = pools("--mem-fraction-static 0.9", model="qwen3.6-35b-a3b")
    four = pools("--mem-fraction-static 0.9 --tp-size 4", model="qwen3.6-35b-a3b")
    assert four.weights_gib == pytest.approx(one.weights_gib / 4)
    assert four.state_bytes_per_slot == 16_097_280 and four.kv_bytes_per_token == 10_240


def test_weights_that_do_not_fit_say_what_to_do() -> None:
    with pytest.raises(DoesNotFitError, match="--tp-size"):
        pools("", gpu=GpuCatalog.load().get("h100"), model="llama-3.1-70b")


def test_too_many_explicit_slots_leave_no_kv() -> None:
    with pytest.raises(DoesNotFitError, match="no room left for KV"):
        pools("--mem-fraction-static 0.9 --disable-radix-cache --max-running-requests 400")


def test_extra_buffer_on_a_model_without_support_is_refused() -> None:
    cfg_model = load_model("qwen3.6-27b")
    unsupported = type(cfg_model)(**{**{f: getattr(cfg_model, f) for f in cfg_model.__slots__}, "model_type": "lfm2"})
    with pytest.raises(ConfigError, match="does not support extra_buffer"):
        resolve_strategy(unsupported, parse_flags("--mamba-scheduler-strategy extra_buffer"), "extra_buffer")


def test_high_fraction_warns_about_headroom() -> None:
    p = pools("--mem-fraction-static 0.95")
    assert any("risk of out-of-memory" in n for n in p.notes)
