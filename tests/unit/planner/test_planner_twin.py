"""The planner's steady state is the one the twin's scheduler reaches: on a KV-bound server with long ordinary
answers (admitted on the decaying new-token ratio, retracted when the pool runs out), the planner's running count
is within 10 % of the mean the twin runs with a queue always waiting.

The twin is run in virtual time (``tests/stage.py``: the scheduler driven event to event, a closed-loop client at
twice the running cap), its answer lengths log-normal about the mean and cut at max_tokens, as the simulator draws
them; the planner is given what a client measures: the mean prompt and answer, max_tokens and the answers' spread.
"""

from __future__ import annotations

import pytest

from tests.helpers.stage import Load, StagedServer
from tokenmill.config import PlannerSpec
from tokenmill.planner import parse_flags
from tokenmill.planner.capacity import build_capacity
from tokenmill.planner.catalog import load_model
from tokenmill.planner.hardware import GpuCatalog
from tokenmill.planner.plan import Workload, kv_bound_running

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
WARMUP_S, MEASURE_S = 600.0, 2400.0  # virtual seconds: past the first cohort, then ~15 answers' lives
SIGMA = 0.6  # the simulator's default spread of answer lengths

CASES = {
    # the radix-off change autotune proposes, with a cap above what the KV pool holds
    "short-prompts-3000": ("--disable-radix-cache --max-running-requests 140", 20, 1500, 3000),
    "long-answers-4096": ("--disable-radix-cache --max-running-requests 120", 20, 2500, 4096),
    # the drafter corpus: ~2,700-token answers under an 8,192 limit, bf16 state
    "drafter-8192": ("--disable-radix-cache --max-running-requests 140 --mamba-ssm-dtype bfloat16", 200, 2700, 8192),
}


def twin_running(flags: str, load: Load) -> tuple[float, float]:
    """The twin's mean running count over the measured part (sampled each virtual second) and its answers' mean."""
    server = StagedServer(MODEL, GPU, flags, load)
    server.run_until(WARMUP_S)
    samples = []
    t = WARMUP_S
    while t < WARMUP_S + MEASURE_S:
        t += 1.0
        server.run_until(t)
        samples.append(server.scheduler.running)
    return sum(samples) / len(samples), sum(server.outputs) / len(server.outputs)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_planners_kv_bound_running_is_the_twins(case: str) -> None:
    flags, prompt, output, max_tokens = CASES[case]
    load = Load(prompt, output, 2 * 140, max_tokens=max_tokens, sigma=SIGMA)
    running, mean_output = twin_running(flags, load)
    config = PlannerSpec()
    cap = build_capacity(load_model(MODEL), GpuCatalog.load().get(GPU), parse_flags(flags), config)
    work = Workload(10_000, prompt, mean_output, max_tokens=max_tokens, output_sigma=SIGMA)
    planned = kv_bound_running(cap, work, config)
    assert planned < cap.max_running  # the case is KV-bound
    assert planned == pytest.approx(running, rel=0.10), (planned, running)
