"""A change that touches memory states its out-of-memory risk: what it leaves outside SGLang's static pools,
against SGLang's own reserve estimate (the planner's ``reserved_mib``), with the level set by
``PlannerSpec.oom_risk_high``; autotune does not try a change above ``autotune.max_memory_risk``."""

from __future__ import annotations

from tests.helpers.doctor import observe
from tokenmill.config import DoctorSpec, PlannerSpec
from tokenmill.doctor import PlannerPredictor, Verdict, diagnose
from tokenmill.doctor.outputs import changes_outputs
from tokenmill.planner.hardware import GpuCatalog

MODEL, GPU = "qwen3.6-35b-a3b", "h200"


def state_verdict(config: PlannerSpec | None = None) -> Verdict:
    found = diagnose(observe("state_bound_no_buffer"), DoctorSpec(), PlannerPredictor(MODEL, GPU, config))
    return next(v for v in found if v.rule == "state-pool-bound")


def test_a_larger_static_share_is_a_ranked_prediction_with_its_memory_risk() -> None:
    v = state_verdict()
    change = next(c for c in v.changes if c.startswith("--mem-fraction-static"))
    pred = v.prediction(change)
    assert pred is not None and pred.source == "planner" and pred.gain is not None and pred.gain > 0
    # ranked by gain among the changes that keep the model's outputs (those that change them come after)
    same = [c for c in v.changes if not changes_outputs(c)]
    gains = {c: p.gain or 0 for c in same if (p := v.prediction(c)) is not None}
    assert same.index(change) == sorted(same, key=lambda c: -gains.get(c, 0)).index(change)
    risk = pred.memory
    assert risk is not None
    value = float(change.split()[1])
    gpu_gib = GpuCatalog.load().get(GPU).memory_gib
    assert abs(risk.headroom_after_gib - gpu_gib * (1 - value)) < 0.01  # what the new fraction leaves
    assert risk.headroom_after_gib < risk.headroom_before_gib
    # today's server keeps more than SGLang's estimate, the change keeps less, but more than half of it
    assert risk.headroom_before_gib > risk.reserve_gib > risk.headroom_after_gib > 0.5 * risk.reserve_gib
    assert risk.level == "moderate"
    assert "out-of-memory risk moderate" in pred.text()
    as_json = next(p for p in v.as_dict()["predictions"] if p["change"] == change)["memory_risk"]
    assert as_json["level"] == "moderate" and as_json["reserve_gib"] == round(risk.reserve_gib, 2)


def test_the_level_follows_the_configured_threshold() -> None:
    v = state_verdict(PlannerSpec(oom_risk_high=0.99))
    pred = next(v.prediction(c) for c in v.changes if c.startswith("--mem-fraction-static"))
    assert pred is not None and pred.memory is not None and pred.memory.level == "high"


def test_changes_that_do_not_touch_memory_state_no_risk() -> None:
    v = state_verdict()
    for change in v.changes:
        pred = v.prediction(change)
        assert pred is not None
        if change.startswith("--mem-fraction-static"):
            continue
        # radix off and a bf16 state re-split the pools; what stays outside them is unchanged
        assert pred.memory is None, (change, pred.memory)


def test_an_fp8_kv_cache_keeps_the_pools_size_so_its_risk_is_low() -> None:
    found = diagnose(observe("kv_bound"), DoctorSpec(), PlannerPredictor("llama-3.1-8b", "h100"))
    v = next(v for v in found if v.rule == "kv-bound")
    pred = v.prediction("--kv-cache-dtype fp8_e4m3")
    assert pred is not None and pred.memory is not None
    assert pred.memory.headroom_after_gib == pred.memory.headroom_before_gib
    assert "(as today)" in pred.memory.text()
