"""Running the rule table over an observation, ranking the verdicts by impact, and keeping a steady verdict list
during a run.

Each verdict's changes are predicted (the planner on the server's real flags, else the observed numbers); a
change predicted to gain less than ``min_gain`` is dropped (it cannot help), and so is a recurrent-state flag
on a server without a state pool. A verdict's impact is its best change's predicted gain of the fleet's
throughput: a server's gain times the share of the fleet the verdict names. Verdicts are ranked by impact;
the ones without (no change predicted to help, or nothing to predict with) come after, in table order. A
verdict's changes that keep the model's outputs come first; those that change them
(:mod:`tokenmill.doctor.outputs`) come after, and count toward its impact only when it has no other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tokenmill.config import DoctorSpec
from tokenmill.doctor.model import (
    Candidate,
    ClientObs,
    Finding,
    Observation,
    Prediction,
    ServerObs,
    Verdict,
)
from tokenmill.doctor.observed import observed_prediction, restore_prediction
from tokenmill.doctor.outputs import changes_outputs
from tokenmill.doctor.predict import Predictor
from tokenmill.doctor.rules import RULES, Rule, hybrid
from tokenmill.monitor.snapshot import binding_verdict

# launch flags that exist only for a recurrent-state (Mamba / GDN) pool
STATE_FLAGS = ("--mamba-", "--max-mamba-cache-size", "SGLANG_MAMBA")
RULE_ORDER = {r.id: i for i, r in enumerate(RULES)}
HEADLINE_MARGIN = 1.1  # during a run, a new headline must predict this many times the shown one's impact


def touches_state(change: str) -> bool:
    """Whether a change sets a flag that only a model with a recurrent-state pool has."""
    return any(word.startswith(STATE_FLAGS) for word in change.split())


def _helps(pred: Prediction | None, spec: DoctorSpec) -> bool:
    """False when the prediction says the change cannot help: no gain from the planner, no more running."""
    if pred is None:
        return True  # nothing to judge it by: shown, never ranked on
    if pred.gain is not None:
        return pred.gain >= spec.min_gain
    return pred.after.max_running > pred.before.max_running


def _predictions(
    server: ServerObs | None,
    client: ClientObs,
    cands: Sequence[Candidate],
    predictor: Predictor | None,
    spec: DoctorSpec,
) -> list[tuple[Candidate, Prediction | None]]:
    """The candidates that can apply and help, each with its prediction, best predicted gain first."""
    pairs: list[tuple[Candidate, Prediction | None]] = []
    for cand in cands:
        if server is not None and touches_state(cand.change) and not hybrid(server.view):
            continue  # a dense model has no state pool: its flags cannot help
        if server is not None and cand.running_before is not None and server.client.limit is None:
            continue  # a client in-flight change rests on the client's limit: unknown, there is no number to give
        pred = None
        if server is not None:
            pred = predictor(server, client, cand) if predictor is not None else None
            pred = pred or observed_prediction(server, cand)
        if _helps(pred, spec):
            pairs.append((cand, pred))

    def gain(pair: tuple[Candidate, Prediction | None]) -> float:
        p = pair[1]
        return p.gain if p is not None and p.gain is not None else -1.0

    pairs.sort(key=gain, reverse=True)  # stable: without gains the rule's order stays
    pairs.sort(key=lambda pair: changes_outputs(pair[0].change))  # the model's own outputs first, then apart
    return pairs


def _verdict(
    rule: Rule,
    finding: Finding,
    servers: tuple[str, ...],
    total: int,
    rep: ServerObs | None,
    obs: Observation,
    predictor: Predictor | None,
    spec: DoctorSpec,
) -> Verdict:
    pairs = _predictions(rep, obs.client, finding.candidates, predictor, spec)
    if rule.id == "server-down":
        restored = restore_prediction(obs, servers)
        if restored is not None:
            pairs = [(Candidate(restored.change, (), kind="action"), restored)]
    # a prediction may refine its change (the planner picks the radix-off cap that fills memory exactly)
    changes = tuple(p.change if p else c.change for c, p in pairs)
    preds = tuple(p for _, p in pairs if p is not None)
    # a verdict's impact is what it gains keeping the model's outputs; only without such a change, the others'
    same = [p for p in preds if not changes_outputs(p.change)]
    evidence = finding.evidence
    if len(servers) > 1:
        evidence = (("servers", f"{len(servers)}/{total}: " + ", ".join(servers[:8])), *evidence)
    return Verdict(
        rule=rule.id,
        binds=rule.binds,
        title=rule.title,
        severity=finding.severity,
        servers=servers,
        of_servers=total,
        summary=finding.summary,
        evidence=evidence,
        advice=finding.advice,
        changes=changes,
        predictions=preds,
        caveats=tuple(c.note or "" for c, _ in pairs),
        kinds=tuple(c.kind for c, _ in pairs),
        impact=_impact(same, len(servers), total) if same else _impact(preds, len(servers), total),
    )


def _impact(preds: Sequence[Prediction], servers: int, total: int) -> float | None:
    """The best predicted gain of the fleet's throughput: a server's gain on the share of the fleet it applies to."""
    best: float | None = None
    for p in preds:
        if p.gain is None or p.gain <= 0:
            continue
        share = 1.0 if p.scope == "fleet" or not servers or not total else servers / total
        best = max(best or 0.0, p.gain * share)
    return best


def rank(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Highest predicted impact first; verdicts without one after them, in the table's order."""

    def key(v: Verdict) -> tuple[bool, float, int]:
        return (v.impact is None, -(v.impact or 0.0), RULE_ORDER.get(v.rule, len(RULE_ORDER)))

    return sorted(verdicts, key=key)


def _with_plans(obs: Observation, predictor: Predictor | None) -> Observation:
    """Each server with the planner's picture of it today (when the planner knows the model and GPU)."""
    if predictor is None:
        return obs
    servers = tuple(replace(s, plan=predictor.today(s, obs.client)) if s.view.healthy else s for s in obs.servers)
    return replace(obs, servers=servers)


def diagnose(
    obs: Observation,
    spec: DoctorSpec,
    predictor: Predictor | None = None,
    rules: Sequence[Rule] = RULES,
) -> list[Verdict]:
    """Every rule that fires, ranked by predicted impact; a server rule gives one verdict for all servers it matches."""
    obs = _with_plans(obs, predictor)
    verdicts: list[Verdict] = []
    total = len(obs.servers)
    for rule in rules:
        if rule.check_client is not None:
            finding = rule.check_client(obs, spec)
            if finding is not None:
                verdicts.append(_verdict(rule, finding, (), total, None, obs, predictor, spec))
            continue
        if rule.check is None:
            continue
        hits = [(s, f) for s in obs.servers if (f := rule.check(s, obs.client, spec)) is not None]
        if hits:
            rep, finding = hits[0]
            urls = tuple(s.url for s, _ in hits)
            verdicts.append(_verdict(rule, finding, urls, total, rep, obs, predictor, spec))
    return rank(verdicts)


def headline(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The verdict to act on first: the highest impact; None when no verdict has a change predicted to help."""
    best = rank(verdicts)[:1]
    return best[0] if best and best[0].impact is not None else None


def binding(verdicts: Sequence[Verdict]) -> str | None:
    """The binding resource of ranked ``verdicts`` (:func:`~tokenmill.monitor.snapshot.binding_verdict`)."""
    v = binding_verdict(rank(verdicts))
    return v.binds if v is not None else None


class DoctorState:
    """Verdicts shown during a run: one appears after ``confirm`` rounds in a row, and goes after ``confirm``
    rounds without it, so one noisy scrape neither raises nor clears a verdict. Shown verdicts are ranked by
    their latest predicted impact; the headline gives way only to a clearly larger one (``HEADLINE_MARGIN``)."""

    def __init__(self, confirm: int) -> None:  # DoctorSpec.confirm_rounds
        self.confirm = confirm
        self.shown: list[Verdict] = []
        self._seen: dict[str, int] = {}
        self._missed: dict[str, int] = {}
        self._latest: dict[str, Verdict] = {}

    def update(self, verdicts: Sequence[Verdict]) -> bool:
        """Take one round's verdicts; True when the set of shown rules or the headline changed."""
        now = {v.rule: v for v in verdicts}
        before = [v.rule for v in self.shown]
        for rule in now:
            self._seen[rule] = self._seen.get(rule, 0) + 1
            self._missed.pop(rule, None)
            self._latest[rule] = now[rule]
        for rule in list(self._seen):
            if rule not in now:
                self._missed[rule] = self._missed.get(rule, 0) + 1
                if rule not in before or self._missed[rule] >= self.confirm:
                    self._seen.pop(rule, None)
                    self._missed.pop(rule, None)
                    self._latest.pop(rule, None)
        keep = [r for r in self._latest if r in before or (self._seen.get(r, 0) >= self.confirm and r in now)]
        shown = rank([self._latest[r] for r in keep])
        if before and shown and shown[0].rule != before[0]:
            # the headline changes only when another verdict's impact clearly passes it (no flapping between two
            # verdicts whose predictions move with the measured lengths)
            old = next((v for v in shown if v.rule == before[0]), None)
            if old is not None and old.impact is not None and (shown[0].impact or 0) < HEADLINE_MARGIN * old.impact:
                shown = [old, *(v for v in shown if v is not old)]
        self.shown = shown
        rules = [v.rule for v in shown]
        return set(rules) != set(before) or rules[:1] != before[:1]

    def confirmed(self, rule: str) -> int:
        """Rounds in a row ``rule`` has fired (0 when it is not firing now)."""
        return self._seen.get(rule, 0) if rule not in self._missed else 0
