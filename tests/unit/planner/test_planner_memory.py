"""SGLang pool sizing, pinned to cases computed by hand from SGLang 0.5.23's sizing code.

Sources (``sglang/srt/`` of 0.5.23): ``arg_groups/memory_hook.py`` (automatic --mem-fraction-static, graph
reserve, multimodal factor), ``mem_cache/kv_cache_configurator.py`` (budget, state slots with the padding
slot, ``resolve_max_num_reqs``, S), ``arg_groups/overrides.py`` (``auto``). Each case states its arithmetic.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.catalog import load_model
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GIB, GpuCatalog, GpuSpec
from tokenmill.planner.memory import DoesNotFitError, PoolPlan, resolve_strategy, size_pools
from tokenmill.planner.models import ModelSpec, weight_bytes
from tokenmill.planner.reserve import auto_mem_fraction_static, prefill_graph_sizes, vlm_mem_fraction_factor

QWEN27 = load_model("qwen3.6-27b")
SLOT_27B = 153_944_064  # docs/reference/hardware.md §3.2, fp32 SSM
KV_27B = 65_536  # docs/reference/hardware.md §3.1, bf16
MM_RESERVE = 100 * (1 << 20)  # SGLANG_VLM_CACHE_SIZE_MB for a multimodal model

# A 96 GiB GPU with nothing used before SGLang measures, at --mem-fraction-static 0.9, Qwen3.6-27B bf16:
#   weights (text + vision) = 27,355,639,808 params x 2 B = 54,711,279,616 B
#   rest = 96 GiB x 0.9 - weights - 100 MiB = 92,771,293,593.6 - 54,711,279,616 - 104,857,600 = 37,955,156,377 B
#   ratio budget = int(rest x 0.9/1.9) = 17,978,758,283 B; slots = (budget - slot) // slot = 115 (padding slot)
#   KV = rest - 116 x slot = 20,097,644,953 B -> // 65,536 = 306,665 tokens
GPU_96 = GpuSpec(key="test-96", name="test 96 GiB", memory_mib=96 * 1024, bandwidth_gbs=1000, bf16_tflops=100)
REST_96 = 37_955_156_377


def pools(flags: str, gpu: GpuSpec = GPU_96, model: str = "qwen3.6-27b", version: str | None = "0.5.23") -> PoolPlan:
    return size_pools(load_model(model), gpu, parse_flags(flags), cuda_context_gib=0.0, sglang_version=version)


def retyped(spec: ModelSpec, **changes: object) -> ModelSpec:
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def test_rest_is_available_times_fraction_minus_weights_and_the_multimodal_reserve() -> None:
    assert weight_bytes(QWEN27).resident == 54_711_279_616
    p = pools("--mem-fraction-static 0.9")
    assert int(p.rest_gib * GIB) == REST_96
    assert p.multimodal_reserve_gib == pytest.approx(MM_RESERVE / GIB)
    assert p.weights_gib == pytest.approx(50.954, abs=1e-3)


def test_ratio_slots_leave_room_for_the_pools_padding_slot() -> None:
    p = pools("--mem-fraction-static 0.9")
    assert p.mamba_slots == 115
    assert p.kv_tokens == (REST_96 - 116 * SLOT_27B) // KV_27B == 306_665
    assert p.state_gib * GIB == pytest.approx(116 * SLOT_27B)


def test_extra_buffer_with_overlap_holds_five_slots_per_request() -> None:
    # S = 3 + 2; max running = 115 // 5 = 23
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (115, 5, 23)
    assert p.strategy.overlap and p.max_running_source == "state slots // 5"


def test_no_buffer_holds_three_runs_without_overlap_and_says_0523_refuses_it_with_overlap() -> None:
    # S = 3; 115 // 3 = 38. 0.5.23 asserts --disable-overlap-schedule for no_buffer (mamba_hook.py)
    p = pools("--mem-fraction-static 0.9 --mamba-radix-cache-strategy no_buffer")
    assert (p.slots_per_request, p.max_running, p.strategy.overlap) == (3, 38, False)
    assert any("refuses no_buffer without --disable-overlap-schedule" in n for n in p.notes)
    ok = pools("--mem-fraction-static 0.9 --mamba-radix-cache-strategy no_buffer --disable-overlap-schedule")
    assert not any("refuses" in n for n in ok.notes)
    # up to 0.5.13 SGLang turned the overlap scheduler off itself
    old = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer", version="0.5.10")
    assert any("turns the overlap scheduler off" in n for n in old.notes)


def test_no_buffer_runs_with_page_size_one() -> None:
    paged = pools(
        "--mem-fraction-static 0.9 --mamba-radix-cache-strategy no_buffer --disable-overlap-schedule --page-size 64"
    )
    assert paged.page_size == 1 and paged.kv_tokens == 306_665  # not rounded down to 306,624
    assert pools("--mem-fraction-static 0.9 --page-size 64").kv_tokens == 306_665 // 64 * 64


def test_extra_buffer_without_overlap_holds_four() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer --disable-overlap-schedule")
    assert (p.slots_per_request, p.max_running) == (4, 28)  # 3 + 1; 115 // 4


def test_extra_buffer_lazy_holds_four() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-radix-cache-strategy extra_buffer_lazy")
    assert (p.strategy.strategy, p.slots_per_request, p.max_running) == ("extra_buffer_lazy", 4, 28)


def test_skip_decode_lock_lowers_the_base_by_one_except_for_no_buffer() -> None:
    # kv_cache_configurator.py: MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP, MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER
    p = pools("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 --mem-fraction-static 0.9 --mamba-scheduler-strategy extra_buffer")
    assert p.slots_per_request == 4
    q = pools("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 --mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer")
    assert q.slots_per_request == 3


def test_radix_off_with_max_running_sizes_the_state_pool_exactly() -> None:
    # slots = 100 (+ the padding slot); KV = rest - 101 x slot = 22,407,805,913 B -> 341,900 tokens
    p = pools("--mem-fraction-static 0.9 --disable-radix-cache --max-running-requests 100")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (100, 1, 100)
    assert p.kv_tokens == (REST_96 - 101 * SLOT_27B) // KV_27B == 341_900
    assert p.mamba_slots_source.startswith("--max-running-requests")


def test_radix_off_without_max_running_uses_the_ratio_and_one_slot() -> None:
    p = pools("--mem-fraction-static 0.9 --disable-radix-cache")
    assert (p.mamba_slots, p.slots_per_request, p.max_running) == (115, 1, 115)


def test_explicit_max_mamba_cache_size_wins() -> None:
    # 200 slots + padding; KV = rest - 201 x slot = 7,012,383,513 B -> 107,000 tokens; 200 // 5 = 40
    p = pools("--mem-fraction-static 0.9 --max-mamba-cache-size 200 --mamba-scheduler-strategy extra_buffer")
    assert (p.mamba_slots, p.max_running, p.kv_tokens) == (200, 40, 107_000)


def test_explicit_max_running_below_the_state_bound_is_kept() -> None:
    p = pools("--mem-fraction-static 0.9 --mamba-scheduler-strategy no_buffer --max-running-requests 16")
    assert (p.max_running, p.max_running_source) == (16, "--max-running-requests")


def test_explicit_max_running_is_cut_to_half_the_kv_tokens_not_to_sglangs_estimate() -> None:
    # resolve_max_num_reqs: min(flag, tokens // 2); the 2048-4096 estimate caps only the automatic value
    big = pools("--mem-fraction-static 0.9 --max-running-requests 5000", model="llama-3.1-8b")
    assert (big.max_running, big.max_running_source) == (5000, "--max-running-requests")
    starved = pools(
        "--mem-fraction-static 0.9 --max-total-tokens 1000 --max-running-requests 800", model="llama-3.1-8b"
    )
    assert (starved.max_running, starved.max_running_source) == (500, "KV tokens // 2")


def test_full_memory_ratio_moves_the_split() -> None:
    # r = 0.5: budget = int(rest / 3) = 12,651,718,792; slots = (budget - slot) // slot = 81
    p = pools("--mem-fraction-static 0.9 --mamba-full-memory-ratio 0.5")
    assert p.mamba_slots == 81
    assert p.kv_tokens == (REST_96 - 82 * SLOT_27B) // KV_27B


def test_max_total_tokens_caps_the_kv_pool() -> None:
    assert pools("--mem-fraction-static 0.9 --max-total-tokens 100000").kv_tokens == 100_000


def _worked_split_gpu() -> GpuSpec:
    """A GPU whose rest is 50 GiB (to within 1 MiB) for Qwen3.5-35B-A3B bf16 at mfs 0.9, after the 100 MiB reserve."""
    weights = weight_bytes(load_model("qwen3.5-35b-a3b")).resident
    mib = math.ceil((50 * GIB + weights + MM_RESERVE) / 0.9 / (1 << 20))
    return GpuSpec(key="split", name="split", memory_mib=mib, bandwidth_gbs=1000, bf16_tflops=100)


@pytest.mark.parametrize(
    ("flags", "slots", "max_running", "kv_tokens"),
    [
        # docs/reference/sglang.md §2.3 "worked split": rest = 50 GiB, Qwen3.5-35B-A3B, TP=1, fp32 SSM. It has 394
        # slots;
        # 0.5.23 budgets the pool's padding slot, so floor(23.68 GiB / 61.41 MiB) - 1 = 393
        ("--mamba-scheduler-strategy no_buffer", 393, 131, 1.38e6),
        ("--mamba-scheduler-strategy extra_buffer", 393, 78, 1.38e6),
        ("--disable-radix-cache", 393, 393, 1.38e6),
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


def test_prefill_graph_capture_sizes() -> None:
    # generate_prefill_cuda_graph_batch_sizes: 8 (4..32) + 14 (48..256) + 8 (288..512) + 8 (576..1024)
    # + 12 (1280..4096) + 8 (4608..8192) = 58 sizes at 8,192 tokens; 74 at 16,384; 42 at 2,048
    assert [prefill_graph_sizes(n) for n in (2048, 4096, 8192, 16384)] == [42, 50, 58, 74]


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        # reserved = 512 + 1.5 x 8192 + 1/8 x 1024 + 2 x 256 (decode graph) + 8 x 58 (prefill graph) = 13,904 MiB
        # (97,887 - 13,904) / 97,887 = 0.8580
        ("rtx-pro-6000", 0.858),
        # H100 80 GB reports 81,559 MiB: (81,559 - 13,904) / 81,559 = 0.8295
        ("h100", 0.830),
        # 140.4 GiB < 160: same reserve; (143,771 - 13,904) / 143,771 = 0.9033
        ("h200", 0.903),
        # 179 GiB: chunk 16,384, decode graph 512: 512 + 24,576 + 128 + 1,024 + 8 x 74 = 26,832
        # (183,359 - 26,832) / 183,359 = 0.8537
        ("b200", 0.854),
        # 24 GiB: chunk 4,096, decode graph 48, no 10 GiB floor: 512 + 6,144 + 128 + 96 + 8 x 50 = 7,280
        ("rtx-4090", 0.704),
    ],
)
def test_automatic_mem_fraction_static_of_a_text_only_model(gpu: str, expected: float) -> None:
    card = GpuCatalog.load().get(gpu)
    assert auto_mem_fraction_static(card.memory_mib, parse_flags("")) == expected
    assert auto_mem_fraction_static(card.memory_mib, parse_flags(""), load_model("llama-3.1-8b")) == expected


def test_graph_reserve_follows_the_graph_flags() -> None:
    mib = GpuCatalog.load().get("rtx-pro-6000").memory_mib
    # --max-running-requests 64 cuts the default decode graph to 64: 13,904 - 2 x (256 - 64) = 13,520
    assert auto_mem_fraction_static(mib, parse_flags("--max-running-requests 64")) == round((mib - 13_520) / mib, 3)
    # no CUDA graphs: 512 + 12,288 + 128 = 12,928
    assert auto_mem_fraction_static(mib, parse_flags("--disable-cuda-graph")) == round((mib - 12_928) / mib, 3)
    assert auto_mem_fraction_static(mib, parse_flags("--disable-prefill-cuda-graph")) == round((mib - 13_440) / mib, 3)


def test_ten_gib_floor_on_large_gpus() -> None:
    # 80 GiB, chunked prefill 2048: 512 + 3,072 + 128 + 512 + 8 x 42 = 4,560 MiB < 10 GiB floor -> 0.875
    assert auto_mem_fraction_static(80 * 1024, parse_flags("--chunked-prefill-size 2048")) == 0.875


def test_multimodal_factor_for_the_qwen_vision_tower() -> None:
    # adjust_mem_fraction_for_vlm: the Qwen vision config says depth 27, hidden 1152 and has no num_hidden_layers,
    # so L = 24: 24 x 1152^2 / (24 x 1024^2) = 1.265625; 0.95 x (1 - 0.1 x 0.265625) = 0.924765625
    assert vlm_mem_fraction_factor(QWEN27) == pytest.approx(0.924765625)
    assert vlm_mem_fraction_factor(load_model("qwen3.5-397b-a17b")) == pytest.approx(0.924765625)
    assert vlm_mem_fraction_factor(load_model("qwen3-next-80b-a3b")) == 1.0  # text-only architecture
    rtx = GpuCatalog.load().get("rtx-pro-6000")
    p = pools("", gpu=rtx)
    assert p.mem_fraction_static == pytest.approx(0.858 * 0.924765625) and p.mem_fraction_auto
    # a hand-set fraction is used as given
    assert pools("--mem-fraction-static 0.85", gpu=rtx).mem_fraction_static == 0.85


def test_multimodal_architectures_outside_the_allow_list_lose_the_prefill_graph_reserve() -> None:
    mib = GpuCatalog.load().get("rtx-pro-6000").memory_mib
    other_vlm = retyped(QWEN27, architectures=("Qwen2_5_VLForConditionalGeneration",))
    # no prefill graph: 13,904 - 464 = 13,440; (97,887 - 13,440) / 97,887 = 0.8627 -> 0.863, times the same factor
    assert auto_mem_fraction_static(mib, parse_flags(""), other_vlm) == pytest.approx(0.863 * 0.924765625)


@pytest.mark.parametrize(
    ("flags", "version", "strategy", "slots_per_request", "overlap"),
    [
        ("", "0.5.23", "extra_buffer", 5, True),  # overlap wanted, architecture supports it
        ("--disable-overlap-schedule", "0.5.23", "no_buffer", 3, False),
        ("--disable-overlap-schedule --page-size 64", "0.5.23", "extra_buffer", 4, False),  # paging wanted
        ("", "0.5.14", "extra_buffer", 5, True),  # the first release with the new rule (PR #28151)
        ("", "0.5.13", "no_buffer", 3, False),  # up to 0.5.13: no_buffer for every model
        ("", "v0.5.10.post1", "no_buffer", 3, False),
        ("", None, "extra_buffer", 5, True),  # no version: the newest rules
    ],
)
def test_auto_follows_the_sglang_version(
    flags: str, version: str | None, strategy: str, slots_per_request: int, overlap: bool
) -> None:
    choice = resolve_strategy(QWEN27, parse_flags(flags), version)
    assert (choice.strategy, choice.slots_per_request, choice.overlap) == (strategy, slots_per_request, overlap)


def test_auto_picks_no_buffer_for_an_architecture_without_extra_buffer() -> None:
    lfm = retyped(QWEN27, model_type="lfm2", architectures=("Lfm2ForCausalLM",))
    assert resolve_strategy(lfm, parse_flags(""), "0.5.23").strategy == "no_buffer"


def test_extra_buffer_on_a_model_without_support_is_refused() -> None:
    lfm = retyped(QWEN27, model_type="lfm2", architectures=("Lfm2ForCausalLM",))
    with pytest.raises(ConfigError, match="does not support extra_buffer"):
        resolve_strategy(lfm, parse_flags("--mamba-radix-cache-strategy extra_buffer"), "0.5.23")


def test_extra_buffer_without_the_radix_cache_is_ignored_by_new_builds_and_refused_by_old_ones() -> None:
    flags = parse_flags("--disable-radix-cache --mamba-scheduler-strategy extra_buffer")
    assert "ignores" in resolve_strategy(QWEN27, flags, "0.5.23").notes[0]
    assert "refuses" in resolve_strategy(QWEN27, flags, "0.5.10").notes[0]


def test_transformers_have_no_state_pool() -> None:
    p = pools("--mem-fraction-static 0.9", model="llama-3.1-8b")
    # weights = 8,029,995,008 params x 2 B = 16,059,990,016 B; rest = 92,771,293,593 - weights = 76,711,303,577 B
    # (a text-only model: no multimodal reserve); all of it is KV at 128 KiB a token: 585,260 tokens
    assert weight_bytes(load_model("llama-3.1-8b")).resident == 16_059_990_016
    assert p.mamba_slots == 0 and p.slots_per_request == 0 and p.multimodal_reserve_gib == 0
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


def test_high_fraction_warns_about_headroom() -> None:
    p = pools("--mem-fraction-static 0.95")
    assert any("risk of out-of-memory" in n for n in p.notes)
