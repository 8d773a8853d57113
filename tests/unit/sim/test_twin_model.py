"""TwinStepModel: the planner's pools and roofline as the simulator's step model."""

from __future__ import annotations

import pytest

from tokenmill.config import SimSpec
from tokenmill.errors import ConfigError
from tokenmill.planner import server_capacity
from tokenmill.sim.scheduler import PoolModel
from tokenmill.sim.timing import StepModel
from tokenmill.sim.twin import TwinStepModel, kv_policy
from tokenmill.sim.twin_report import describe, server_args

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
EXTRA = "--mamba-scheduler-strategy extra_buffer"
NO_BUFFER = "--mamba-scheduler-strategy no_buffer"
RADIX_OFF = "--disable-radix-cache --max-running-requests 48"


def twin(flags: str, model: str = MODEL) -> TwinStepModel:
    return TwinStepModel(server_capacity(model, GPU, flags))


@pytest.mark.parametrize(
    ("flags", "held", "strategy"),
    # no_buffer: the working slot and the prompt's cached state, as a real 0.5.23 hybrid shows (tests/conformance)
    [(EXTRA, 3, "extra_buffer"), (NO_BUFFER, 2, "no_buffer"), (RADIX_OFF, 1, "radix off")],
)
def test_pools_are_the_planners_and_a_request_holds_its_working_and_track_slots(
    flags: str, held: int, strategy: str
) -> None:
    cap = server_capacity(MODEL, GPU, flags)
    t = TwinStepModel(cap)
    assert isinstance(t, PoolModel)
    assert (t.max_running_requests, t.max_total_tokens, t.mamba_slots) == (
        cap.max_running,
        cap.kv_tokens,
        cap.mamba_slots,
    )
    assert t.held_slots == held
    assert describe(t)["strategy"] == strategy
    full = t.usage(cap.max_running, cap.max_running * 1500)
    assert full.mamba_used == cap.max_running * held
    assert full.mamba_usage == pytest.approx(cap.max_running * held / cap.mamba_slots)
    assert full.full_token_usage == pytest.approx(cap.max_running * 1500 / cap.kv_tokens)
    assert full.token_usage == round(max(full.mamba_usage, full.full_token_usage), 2)


def test_the_three_configurations_differ_where_sglang_differs() -> None:
    extra, no_buffer, off = twin(EXTRA), twin(NO_BUFFER), twin(RADIX_OFF)
    # SGLang 0.5.23 sizes 78 slots here (automatic fraction 0.858 x the multimodal factor 0.9248); S = 5 vs 3
    assert (extra.max_running_requests, no_buffer.max_running_requests, off.max_running_requests) == (15, 26, 48)
    assert extra.mamba_slots == no_buffer.mamba_slots == 78  # same ratio-sized pool
    assert off.mamba_slots == 48  # exactly --max-running-requests, the KV pool gets the rest
    assert off.max_total_tokens > extra.max_total_tokens == no_buffer.max_total_tokens
    at_cap = [t.usage(t.max_running_requests, 0).mamba_usage for t in (extra, no_buffer, off)]
    assert at_cap == pytest.approx([45 / 78, 52 / 78, 1.0])


def test_admission_stops_at_max_running_and_at_the_kv_pool() -> None:
    t = twin(EXTRA)
    assert t.admit(0, 0, 1000)
    assert t.admit(14, 0, 1000)
    assert not t.admit(15, 0, 1000)
    assert not t.admit(5, t.max_total_tokens - 999, 1000)


def test_step_time_is_the_roofline_and_prefill_reads_the_weights_once_per_batch() -> None:
    cap = server_capacity(MODEL, GPU, EXTRA)
    t = TwinStepModel(cap)
    assert t.step_time_s(20, 30_000) == cap.step_time_s(20, 30_000)
    short = t.prefill_batch_time_s([16])
    assert t.prefill_batch_time_s([16, 16]) < 1.1 * short < 2 * short  # memory-bound: the weights dominate
    long_one = t.prefill_batch_time_s([4096])
    assert t.prefill_batch_time_s([4096, 4096]) == pytest.approx(2 * long_one, rel=0.02)  # compute-bound
    assert long_one == pytest.approx(cap.prefill_compute_s(4096), rel=0.02)  # what the planner's dilution uses
    assert t.prefill_time_s(4096) == long_one


def test_sglang_limits_of_one_request() -> None:
    t = twin("--mem-fraction-static 0.62 " + EXTRA)
    kv = t.max_total_tokens
    assert kv < t.context_length
    assert t.max_req_len == kv - 1
    assert t.max_req_input_len == kv - 6
    assert t.max_new_tokens(1000, 10**9) == kv - 1 - 1000 - 1
    assert t.max_new_tokens(1000, 64) == 64


def test_conservativeness_scales_the_ratio_and_other_flags_are_reported_unmodeled() -> None:
    t = twin(EXTRA + " --schedule-conservativeness 0.5 --enable-torch-compile")
    assert t.kv_policy == kv_policy(0.5)
    assert t.kv_policy.init_ratio == pytest.approx(0.35)
    assert t.kv_policy.min_ratio == pytest.approx(0.35 * 0.14)
    assert t.unmodeled_flags == ("--enable-torch-compile",)
    assert kv_policy(2.0).init_ratio == 1.0  # capped
    with pytest.raises(ConfigError, match="schedule-conservativeness"):
        twin("--schedule-conservativeness lots")


def test_a_dense_model_has_no_state_pool() -> None:
    t = twin("", model="llama-3.1-8b")
    assert not t.is_hybrid
    assert t.mamba_slots == 0 and t.held_slots == 0
    u = t.usage(10, 5000)
    assert (u.mamba_usage, u.mamba_used) == (0.0, 0)
    assert u.token_usage == round(u.full_token_usage, 2)  # SGLang rounds token_usage to two decimals


def test_from_config_reads_model_gpu_flags_and_the_shared_sim_fields() -> None:
    cfg = SimSpec(model="served-name", model_spec=MODEL, gpu=GPU, engine_flags="--disable-radix-cache")
    t = TwinStepModel.from_config(cfg)
    assert (t.max_running_requests, t.mamba_slots) == (78, 78)  # SimSpec's default 256 is not a flag
    given = SimSpec(model=MODEL, gpu=GPU, engine_flags="--disable-radix-cache", max_running_requests=64)
    t = TwinStepModel.from_config(given)
    assert (t.max_running_requests, t.mamba_slots) == (64, 64)
    resolved = t.resolve(given)
    assert (resolved.max_running_requests, resolved.max_total_tokens) == (64, t.max_total_tokens)
    assert resolved.context_length == t.context_length == 262_144
    step: StepModel = t
    assert step.max_running_requests == 64


def test_from_config_errors_say_what_to_change() -> None:
    with pytest.raises(ConfigError, match="disagree"):
        TwinStepModel.from_config(
            SimSpec.model_validate(
                {"model": MODEL, "gpu": GPU, "engine_flags": "--max-running-requests 8", "max_running_requests": 64}
            )
        )
    with pytest.raises(ConfigError, match=r"--model-spec"):
        TwinStepModel.from_config(SimSpec(gpu=GPU))  # the served name tokenmill-sim is no planner model
    with pytest.raises(ConfigError, match=r"--gpu"):
        TwinStepModel.from_config(SimSpec(model=MODEL))
    with pytest.raises(ConfigError, match="unknown GPU"):
        TwinStepModel.from_config(SimSpec(model=MODEL, gpu="gtx-280"))


def test_mixed_chunk_is_modeled_with_chunked_prefill_and_its_batches_read_the_decode_rows_kv() -> None:
    """--enable-mixed-chunk is the twin's (no longer reported unmodeled; /server_info says it); SGLang mixes only
    with chunked prefill on; a batch with decode rows costs more than its prompt tokens alone."""
    on = twin("--enable-mixed-chunk --chunked-prefill-size 2048")
    assert on.mixed_chunk and on.unmodeled_flags == () and server_args(on)["enable_mixed_chunk"] is True
    assert not twin("--chunked-prefill-size 2048").mixed_chunk
    assert not twin("--enable-mixed-chunk --chunked-prefill-size -1").mixed_chunk
    alone = on.prefill_batch_time_s([2000])
    mixed = on.prefill_batch_time_s([2000, *[1] * 48], read_tokens=48 * 4000)
    assert mixed > alone
