"""Predictions from the observed numbers alone, when the planner gives none.

Max running before and after a change (:func:`observed_prediction`), and the fleet's gain from bringing dead servers
back at the live servers' own rates (:func:`restore_prediction`)."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.doctor.model import Candidate, Observation, PlanPoint, Prediction, ServerObs


def observed_prediction(obs: ServerObs, candidate: Candidate) -> Prediction | None:
    """Max running before/after from the observed numbers alone (no throughput)."""
    if candidate.est_max_running is None:
        return None
    v = obs.view
    if candidate.running_before is not None:
        before = candidate.running_before
        return Prediction(
            candidate.change, PlanPoint(before), PlanPoint(candidate.est_max_running), "observed", what="running"
        )
    if not v.max_running:
        return None
    return Prediction(candidate.change, PlanPoint(v.max_running), PlanPoint(candidate.est_max_running), "observed")


def restore_prediction(obs: Observation, down: Sequence[str]) -> Prediction | None:
    """The fleet's throughput with the ``down`` servers back, each at the live servers' mean decode rate."""
    live = [s.view for s in obs.servers if s.url not in down and s.view.healthy and s.view.decode_tok_s]
    if not live or not down:
        return None
    now = sum(v.decode_tok_s or 0.0 for v in live)
    gpus = sum(s.view.gpus for s in obs.servers)
    back = now + now / len(live) * len(down)
    n = len(obs.servers)
    return Prediction(
        "bring the server back" if len(down) == 1 else f"bring the {len(down)} servers back",
        PlanPoint(n - len(down), now / gpus),
        PlanPoint(n, back / gpus),
        "observed",
        what="servers up",
        scope="fleet",
    )
