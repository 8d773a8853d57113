"""The running cap the doctor proposes (and autotune applies) does not over-admit at the job's max_tokens.

A Qwen3.6-27B twin on an RTX PRO 6000 with SGLang's default flags, long answers (mean 2,500 tokens, max_tokens
4,096): the doctor names the state pool and proposes the radix cache off with a ``--max-running-requests`` sized
by SGLang's admission rule for the job's requests. Staged with that change and twice as many requests in flight
as the cap, the twin reaches about the cap and never retracts. A larger cap is worse, not better: with the radix
cache off the state pool is sized to the cap, which takes KV memory, so fewer requests run, and at 1.6x the pool
runs out and SGLang retracts.
"""

from __future__ import annotations

from tests.helpers.stage import Load, Stage, StagedServer, fleet, stage
from tokenmill.config import DoctorSpec
from tokenmill.doctor import PlannerPredictor, diagnose
from tokenmill.doctor.engine import headline

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
PROMPT, OUTPUT, MAX_TOKENS = 1024, 2500, 4096
RADIX_OFF = "--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests"


def run_with_cap(cap: int) -> tuple[StagedServer, float]:
    """15 minutes of the twin with the radix-off change at ``cap``, 2 x ``cap`` in flight; the server and the mean
    running count over the last window."""
    server = StagedServer(MODEL, GPU, f"{RADIX_OFF} {cap}", Load(PROMPT, OUTPUT, 2 * cap, max_tokens=MAX_TOKENS))
    obs = Stage([server]).run(900)
    return server, obs.servers[0].view.running or 0.0


def test_the_proposed_cap_runs_at_about_itself_without_retractions_and_a_larger_one_does_worse() -> None:
    obs = stage(fleet(1, MODEL, GPU, "", Load(PROMPT, OUTPUT, 160, max_tokens=MAX_TOKENS)), seconds=120)
    top = headline(diagnose(obs, DoctorSpec(), PlannerPredictor()))
    assert top is not None and top.rule == "state-pool-bound"
    assert top.changes[0].startswith(RADIX_OFF), top.changes
    cap = int(top.changes[0].split()[-1])

    proposed, running = run_with_cap(cap)
    assert proposed.scheduler.snapshot().retracted_requests == 0
    assert 0.9 * cap <= running <= cap

    larger, larger_running = run_with_cap(round(1.3 * cap))
    much_larger, _ = run_with_cap(round(1.6 * cap))
    assert larger_running < running and len(larger.outputs) < len(proposed.outputs)
    assert much_larger.scheduler.snapshot().retracted_requests > 0
    assert len(much_larger.outputs) < len(larger.outputs)
