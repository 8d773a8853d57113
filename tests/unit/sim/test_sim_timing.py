"""The default step model: linear step time, batch and pool caps, usage fractions."""

from __future__ import annotations

import pytest

from tokenmill.config import SimSpec
from tokenmill.sim.timing import LinearStepModel, StepModel


def model(**kw: object) -> LinearStepModel:
    return LinearStepModel(SimSpec.model_validate({"max_running_requests": 4, "max_total_tokens": 1000, **kw}))


def test_is_a_step_model() -> None:
    m: StepModel = model()
    assert m.max_running_requests == 4
    assert m.mamba_slots == 4
    assert m.max_total_tokens == 1000


def test_step_and_prefill_times_follow_the_config() -> None:
    m = model(step_base_ms=20, step_per_req_ms=0.5, prefill_ms_per_1k=30)
    assert m.step_time_s(0, 0) == pytest.approx(0.020)
    assert m.step_time_s(100, 5000) == pytest.approx(0.070)
    assert m.prefill_time_s(2000) == pytest.approx(0.060)


def test_admission_respects_batch_and_token_caps_but_never_starves() -> None:
    m = model()
    assert m.admit(3, 0, 10)
    assert not m.admit(4, 0, 10)
    assert not m.admit(1, 900, 200)
    assert m.admit(0, 0, 5000)  # an idle engine takes even an oversized request


def test_usage_reports_the_fuller_pool() -> None:
    u = model().usage(1, 500)
    assert (u.full_token_usage, u.mamba_usage, u.token_usage) == (0.5, 0.25, 0.5)
    assert (u.used_tokens, u.mamba_used) == (500, 1)
    assert model().usage(4, 100).token_usage == 1.0
