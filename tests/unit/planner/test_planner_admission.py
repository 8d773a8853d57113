"""The planner's KV bound is SGLang's admission rule per request kind (``planner/admission.py``), the rule the
twin's scheduler runs: for the same pool and requests the planner's running count is what the twin admits."""

from __future__ import annotations

import logging

import pytest

from tokenmill.config import PlannerSpec
from tokenmill.planner import GpuCatalog, load_model, parse_flags, server_capacity
from tokenmill.planner.plan import PlanResult, Workload, plan
from tokenmill.sim.scheduler import Scheduler, SimRequest
from tokenmill.sim.twin import TwinStepModel

MODEL, GPU = "llama-3.1-8b", "rtx-pro-6000"
ARRIVAL_S = 0.5  # far apart enough that each request starts alone: the twin reaches SGLang's staggered steady state
WARMUP_S = 60.0


def planned(kv: int, prompt: int, limit: int, *, ignore_eos: bool) -> PlanResult:
    flags = parse_flags(f"--max-total-tokens {kv}")
    work = Workload(prompts=100_000, input_len=prompt, output_len=limit, ignore_eos=ignore_eos)
    return plan(load_model(MODEL), GpuCatalog.load().get(GPU), flags, work, PlannerSpec())


def twin_running(kv: int, prompt: int, limit: int, *, ignore_eos: bool, arrivals: int = 400) -> list[int]:
    """The twin's running count after each arrival past the warm-up, with requests arriving faster than it serves."""
    sched = Scheduler(
        TwinStepModel(server_capacity(MODEL, GPU, f"--max-total-tokens {kv}")),
        time_scale=1.0,
        max_queued=None,
        log_interval=40,
    )
    seen = []
    for i in range(arrivals):
        now = i * ARRIVAL_S
        req = SimRequest(prompt, limit, now, max_new_tokens=limit, ignore_eos=ignore_eos)
        sched.submit(req, now)
        if now > WARMUP_S:
            seen.append(sched.running)
    assert sched.waiting > 0, "the twin was not saturated"
    return seen


@pytest.mark.parametrize(("kv", "prompt", "limit"), [(20_000, 500, 1_500), (2_048, 60, 900), (50_000, 1_000, 3_000)])
def test_planned_running_is_what_the_twin_admits_for_ignore_eos_requests(kv: int, prompt: int, limit: int) -> None:
    result = planned(kv, prompt, limit, ignore_eos=True)
    assert result.binding == "KV cache"
    seen = twin_running(kv, prompt, limit, ignore_eos=True)
    assert set(seen) == {result.running}


def test_an_ignore_eos_job_plans_fewer_running_than_an_ordinary_one_as_the_twin_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same lengths, another kind: ordinary requests reserve only the settled new-token ratio of what they may
    still write, so more run (the twin then retracts now and then, so its count moves around the planner's)."""
    caplog.set_level(logging.ERROR, logger="tokenmill.sim")
    kv, prompt, limit = 20_000, 500, 1_500
    eos, ordinary = planned(kv, prompt, limit, ignore_eos=True), planned(kv, prompt, limit, ignore_eos=False)
    assert eos.running < ordinary.running
    assert eos.tok_s_per_gpu < ordinary.tok_s_per_gpu
    seen = twin_running(kv, prompt, limit, ignore_eos=False)
    assert min(seen) <= ordinary.running <= max(seen)
    assert sum(seen) / len(seen) > eos.running


def test_the_requests_limit_is_what_ordinary_admission_reserves_for() -> None:
    """A generous max_tokens is reserved for (clipped at 4,096) though answers stop early: fewer run than the mean
    output alone would let in."""
    flags = parse_flags("--max-total-tokens 40000")
    model, gpu = load_model(MODEL), GpuCatalog.load().get(GPU)
    short = plan(model, gpu, flags, Workload(100_000, 1_000, 1_000), PlannerSpec())
    generous = plan(model, gpu, flags, Workload(100_000, 1_000, 1_000, max_tokens=8_192), PlannerSpec())
    assert generous.running < short.running


def test_an_ignore_eos_workload_runs_to_its_limit() -> None:
    from tokenmill.errors import ConfigError

    with pytest.raises(ConfigError, match="ignore_eos"):
        Workload(10, 500, 700, max_tokens=1_000, ignore_eos=True)
    with pytest.raises(ConfigError, match="cannot exceed max_tokens"):
        Workload(10, 500, 1_200, max_tokens=1_000)
