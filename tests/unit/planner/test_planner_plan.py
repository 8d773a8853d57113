"""Plans, comparisons and the what-if ranking."""

from __future__ import annotations

import pytest

from tokenmill.config import PlannerSpec
from tokenmill.errors import ConfigError
from tokenmill.planner.catalog import load_model
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuCatalog
from tokenmill.planner.plan import Workload, compare, plan
from tokenmill.planner.whatif import what_if

CONFIG = PlannerSpec()
QWEN27 = load_model("qwen3.6-27b")
CATALOG = GpuCatalog.load()
PRO6000 = CATALOG.get("rtx-pro-6000")
WORKLOAD = Workload(prompts=10_000, input_len=1024, output_len=1024)


def test_default_flags_on_a_pro_6000_are_state_bound() -> None:
    r = plan(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG)
    assert r.capacity.pools.strategy.strategy == "extra_buffer"
    assert r.binding == "state slots"
    assert r.running == r.capacity.max_running == r.capacity.mamba_slots // 5
    assert r.limits["KV cache"] > 5 * r.running  # the KV pool sits mostly idle
    assert r.step.bound == "memory"


def test_fleet_rate_and_eta() -> None:
    r = plan(QWEN27, PRO6000, parse_flags("--tp-size 2"), WORKLOAD, CONFIG, gpu_count=8)
    assert (r.replicas, r.gpus) == (4, 8)
    assert r.fleet_tok_s == pytest.approx(4 * r.output_tok_s)
    assert r.tok_s_per_gpu == pytest.approx(r.output_tok_s / 2)
    assert r.eta_s == pytest.approx(10_000 * 1024 / r.fleet_tok_s)
    assert r.output_tok_s < r.decode_tok_s  # prefill dilution


def test_prompt_count_can_bind() -> None:
    r = plan(QWEN27, PRO6000, parse_flags("--disable-radix-cache"), Workload(6, 100, 100), CONFIG)
    assert (r.binding, r.running) == ("prompt count", 6)


def test_eta_override_scales_memory_bound_speed() -> None:
    slow = plan(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG, eta=0.3)
    fast = plan(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG, eta=0.6)
    assert slow.capacity.roofline.eta_bw == 0.3
    assert slow.step.t_memory_s == pytest.approx(2 * fast.step.t_memory_s)


def test_too_few_gpus_for_tp() -> None:
    with pytest.raises(ConfigError, match="at least 4 GPUs"):
        plan(QWEN27, PRO6000, parse_flags("--tp-size 4"), WORKLOAD, CONFIG, gpu_count=2)


def test_compare_reports_the_ratio_and_what_does_not_fit() -> None:
    base = plan(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG)
    vs_b200 = compare(base, CATALOG.get("b200"), CONFIG, gpu_count=1)
    assert vs_b200.result is not None and vs_b200.percent is not None
    assert vs_b200.percent == pytest.approx(100 * base.tok_s_per_gpu / vs_b200.result.tok_s_per_gpu)
    assert vs_b200.percent < 100
    vs_4090 = compare(base, CATALOG.get("rtx-4090"), CONFIG, gpu_count=1)
    assert vs_4090.result is None and vs_4090.error and vs_4090.percent is None


def test_strategy_rows_rank_radix_off_first_and_the_default_last() -> None:
    rows = what_if(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG)
    same = [r for r in rows if r.result and (r.ssm_dtype, r.weight_dtype, r.mem_fraction) == ("fp32", "bf16", None)]
    order = [r.strategy for r in same]
    assert order == ["radix off", "no_buffer", "extra_buffer_lazy", "extra_buffer"]
    radix_off, base = same[0], same[-1]
    assert base.is_base and radix_off.tok_s_per_gpu > 2 * base.tok_s_per_gpu
    assert radix_off.flags.disable_radix_cache and radix_off.flags.max_running_requests is not None
    assert "--disable-radix-cache --max-running-requests" in radix_off.command


def test_what_if_is_sorted_and_every_command_reproduces_its_row() -> None:
    rows = what_if(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG)
    fitting = [r for r in rows if r.result]
    rates = [r.tok_s_per_gpu for r in fitting]
    assert rates == sorted(rates, reverse=True)
    assert sum(r.is_base for r in rows) == 1
    assert {r.weight_dtype for r in fitting} == {"bf16", "fp8", "fp4"}  # Blackwell has FP4 tensor cores
    for row in fitting[:10]:
        assert row.result is not None
        replay = plan(QWEN27, PRO6000, parse_flags(row.command), WORKLOAD, CONFIG)
        assert replay.running == row.result.running
        assert replay.tok_s_per_gpu == pytest.approx(row.tok_s_per_gpu)


def test_radix_off_running_fills_kv_and_state_together() -> None:
    rows = what_if(QWEN27, PRO6000, parse_flags(""), WORKLOAD, CONFIG)
    row = next(r for r in rows if r.strategy == "radix off" and r.result)
    assert row.result is not None
    n = row.result.running
    kv_bound = row.result.capacity.kv_bound_running(WORKLOAD.avg_context, CONFIG.kv_target_usage)
    assert n <= kv_bound <= n + 2  # one more request would not fit its KV


def test_dense_models_vary_dtype_and_fraction_only() -> None:
    rows = what_if(load_model("llama-3.1-70b"), CATALOG.get("h100"), parse_flags(""), WORKLOAD, CONFIG)
    assert {r.strategy for r in rows if not r.is_base} == {"radix on"}
    assert {r.ssm_dtype for r in rows} == {None}
    assert "fp4" not in {r.weight_dtype for r in rows}  # no FP4 tensor cores on Hopper
    base = next(r for r in rows if r.is_base)
    assert base.result is None and base.error and "--tp-size" in base.error
    assert any(r.result for r in rows)  # fp8 weights fit on one GPU


def test_workload_validation() -> None:
    assert Workload(10, 1000, 500).avg_context == 1250
    with pytest.raises(ConfigError):
        Workload(0, 1000, 500)


def test_ceiling_is_per_gpu_under_tp() -> None:
    one = plan(QWEN27, PRO6000, parse_flags("--disable-radix-cache"), WORKLOAD, CONFIG)
    two = plan(QWEN27, PRO6000, parse_flags("--disable-radix-cache --tp-size 2"), WORKLOAD, CONFIG, gpu_count=2)
    assert all(p.tok_s_per_gpu < two.ceiling_tok_s_per_gpu for p in two.curve)
    # every per-request byte is split over the two GPUs, so the per-GPU ceiling stays where it was
    assert two.ceiling_tok_s_per_gpu == pytest.approx(one.ceiling_tok_s_per_gpu, rel=1e-9)
    assert two.decode_tok_s == two.step.tokens_per_s
