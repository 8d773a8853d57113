"""Decode roofline (docs/reference/hardware.md §4.1, §5), checked against hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenmill.config import PlannerSpec
from tokenmill.planner.capacity import server_capacity
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.roofline import asymptotic_tok_s, diluted_output_rate, saturation_points

CONFIG = PlannerSpec(
    eta_bw=0.6,
    eta_bw_gddr_ratio=1.0,  # the hand computations below take eta as given on the (GDDR7) RTX PRO 6000
    eta_request_ratio=0.5,
    eta_compute=0.5,
    t_fixed_ms=2.0,
    t_fixed_no_overlap_ms=4.0,
    cuda_context_gib=0.0,
)

# Qwen3.6-27B bf16 on an RTX PRO 6000 (1,792 GB/s), no_buffer (no track copies, overlap off):
#   W_read = 51,247,841,280 B (text linears + lm_head, embedding excluded; docs/reference/hardware.md §2.1 "51.25 GB")
#   per request: 2 x 153,944,064 (state read + write) + 248,320 x 4 x 2 (fp32 logits) = 309,874,688 B
#   20 requests at 1,536 tokens: 30,720 context tokens x 65,536 B = 2,013,265,920 B
#   request bytes = 20 x 309,874,688 + 2,013,265,920 = 8,210,759,680 B; all bytes = 59,458,600,960 B
#   the request bytes move at 0.5 x eta: effective = 51,247,841,280 + 2 x 8,210,759,680 = 67,669,360,640 B
#   t = effective / (0.6 x 1.792e12) + 4 ms = 62.936 ms + 4 ms
W_READ = 51_247_841_280
REQUEST_20 = 8_210_759_680
EFFECTIVE_20 = 67_669_360_640


def test_step_bytes_and_time_by_hand() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--mamba-scheduler-strategy no_buffer", config=CONFIG)
    st = cap.step(20, 20 * 1536)
    assert (st.weight_bytes, st.request_bytes) == pytest.approx((W_READ, REQUEST_20))
    assert st.bytes == pytest.approx(W_READ + REQUEST_20, rel=1e-12)
    assert st.effective_bytes == pytest.approx(EFFECTIVE_20, rel=1e-12)
    assert st.bound == "memory"
    assert st.time_s == pytest.approx(EFFECTIVE_20 / (0.6 * 1.792e12) + 0.004, rel=1e-12)
    assert cap.step_time_s(20, 20 * 1536) == st.time_s
    assert st.tokens_per_s == pytest.approx(20 / (EFFECTIVE_20 / 1.0752e12 + 0.004))


def test_per_request_traffic_efficiency_makes_the_marginal_request_dearer() -> None:
    equal = server_capacity(
        "qwen3.6-27b",
        "rtx-pro-6000",
        "--mamba-scheduler-strategy no_buffer",
        config=CONFIG.model_copy(update={"eta_request_ratio": 1.0}),
    )
    split = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--mamba-scheduler-strategy no_buffer", config=CONFIG)
    # one request alone is almost all weights: the ratio barely matters; at 20 it adds 8.2 GB at half speed
    assert split.step_time_s(1, 1536) == pytest.approx(equal.step_time_s(1, 1536), rel=0.02)
    extra = split.step_time_s(20, 20 * 1536) - equal.step_time_s(20, 20 * 1536)
    assert extra == pytest.approx(REQUEST_20 / (0.6 * 1.792e12), rel=1e-9)


def test_overlap_uses_the_smaller_fixed_cost_and_track_copies_add_state_traffic() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--mamba-scheduler-strategy extra_buffer", config=CONFIG)
    st = cap.step(20, 20 * 1536)
    # extra_buffer copies the state into its track slot every 256 tokens: + 2 x slot / 256 per request
    assert st.bytes == pytest.approx(W_READ + REQUEST_20 + 20 * 2 * 153_944_064 / 256, rel=1e-12)
    assert st.t_fixed_s == 0.002


def test_kv_reads_grow_with_context() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--mamba-scheduler-strategy no_buffer", config=CONFIG)
    short, long = cap.step(8, 8 * 1000), cap.step(8, 8 * 9000)
    assert long.bytes - short.bytes == pytest.approx(8 * 8000 * 65_536)
    assert long.time_s > short.time_s


def test_step_time_of_nothing_is_zero() -> None:
    cap = server_capacity("llama-3.1-8b", "h100", config=CONFIG)
    assert cap.step_time_s(0, 0) == 0.0


def test_compute_bound_when_bandwidth_is_plentiful() -> None:
    gpu = GpuSpec(key="wide", name="wide", memory_mib=96 * 1024, bandwidth_gbs=1e6, bf16_tflops=100)
    cap = server_capacity("llama-3.1-8b", gpu, "--mem-fraction-static 0.9", config=CONFIG)
    st = cap.step(64, 64 * 512)
    assert st.bound == "compute"
    # 2 x (8.03 B params - embedding) per token + 4 x 32 heads x 128 x 32 layers per context token
    flops = 64 * 2 * (8_029_995_008 - 525_336_576) + 64 * 512 * 4 * 32 * 128 * 32
    assert st.flops == pytest.approx(flops, rel=1e-9)
    assert st.time_s == pytest.approx(flops / (0.5 * 100e12) + 0.002, rel=1e-9)


def test_moe_reads_more_experts_as_the_batch_grows() -> None:
    cap = server_capacity("qwen3-next-80b-a3b", "b200", config=CONFIG)
    assert cap.cost.experts_touched(1) == pytest.approx(10 / 512)
    assert cap.cost.experts_touched(1000) == pytest.approx(1.0, abs=1e-8)
    one, many = cap.step(1, 1000), cap.step(256, 256_000)
    assert many.bytes - one.bytes > 0.5 * cap.cost.experts_bytes


def test_tp_splits_the_work_across_gpus() -> None:
    one = server_capacity("qwen3.6-27b", "h200", "--mamba-scheduler-strategy no_buffer", config=CONFIG)
    two = server_capacity("qwen3.6-27b", "h200", "--mamba-scheduler-strategy no_buffer --tp-size 2", config=CONFIG)
    assert two.cost.weights_dense_bytes == pytest.approx(one.cost.weights_dense_bytes / 2)
    assert two.step(16, 16_000).time_s < one.step(16, 16_000).time_s


def test_prefill_dilution_formula() -> None:
    # R_out = T / (1 + T x t_pf / L_out) (docs/reference/hardware.md §4.1)
    assert diluted_output_rate(1000.0, 0.2, 1000.0) == pytest.approx(1000 / 1.2)
    assert diluted_output_rate(0.0, 0.2, 1000.0) == 0.0


def test_prefill_takes_longer_for_longer_prompts() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", config=CONFIG)
    assert 0 < cap.prefill_time_s(512) < cap.prefill_time_s(8192)
    assert cap.prefill_time_s(0) == 0.0
    # a 1,024-token prompt in a big batch: 2 x 25.62 B x 1,024 FLOPs at 0.5 x 500 TF ≈ 0.21 s
    assert cap.prefill_compute_s(1024) == pytest.approx(0.21, abs=0.01)


def test_saturation_points() -> None:
    assert saturation_points(20) == [1, 2, 4, 8, 16, 20]
    assert saturation_points(1) == [1]
    assert saturation_points(16) == [1, 2, 4, 8, 16]


def test_throughput_rises_with_running_toward_the_ceiling() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", "--disable-radix-cache", config=CONFIG)
    rates = [cap.decode_tok_s(b, 1536) for b in (1, 16, 128, 1024)]
    assert rates == sorted(rates)
    ceiling = asymptotic_tok_s(cap.cost, cap.roofline, 1536)
    assert rates[-1] < ceiling
    # docs/reference/hardware.md §4.1: ceiling = eta x r x BW / (2 x slot + c x kv (+ logits));
    # no track copies without radix
    assert ceiling == pytest.approx(0.6 * 0.5 * 1.792e12 / (2 * 153_944_064 + 1536 * 65_536 + 1_986_560))


def test_a_gddr_card_defaults_to_a_higher_bandwidth_efficiency_than_an_hbm_one() -> None:
    config = PlannerSpec(eta_bw=0.7, eta_bw_gddr_ratio=1.2)
    gddr = server_capacity("llama-3.1-8b", "rtx-5090", config=config)
    hbm = server_capacity("llama-3.1-8b", "a100-80gb", config=config)
    assert (gddr.gpu.memory, hbm.gpu.memory) == ("gddr7", "hbm2e")
    assert gddr.roofline.eta_bw == pytest.approx(0.84) and hbm.roofline.eta_bw == pytest.approx(0.7)
    # a calibrated eta is the card's own: used as given
    assert server_capacity("llama-3.1-8b", "rtx-5090", config=config, eta=0.61).roofline.eta_bw == 0.61
    # never above the peak: the roofline's ideal (eta 1) stays 1 on a GDDR card
    assert (
        server_capacity("llama-3.1-8b", "rtx-5090", config=config.model_copy(update={"eta_bw": 1.0})).roofline.eta_bw
        == 1.0
    )
    # a card without a memory technology is planned as HBM
    plain = replace(gddr.gpu, key="mine", memory=None)
    assert server_capacity("llama-3.1-8b", plain, config=config).roofline.eta_bw == pytest.approx(0.7)
