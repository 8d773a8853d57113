"""Running the rule table over an observation, and keeping a steady verdict list during a run."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.config import DoctorSpec
from tokenmill.doctor.model import Candidate, ClientObs, Finding, Observation, Prediction, ServerObs, Verdict
from tokenmill.doctor.predict import Predictor, observed_prediction
from tokenmill.doctor.rules import RULES, Rule


def _predictions(
    server: ServerObs | None, client: ClientObs, cands: Sequence[Candidate], predictor: Predictor | None
) -> tuple[tuple[str, ...], tuple[Prediction, ...], tuple[str, ...]]:
    """The changes, best predicted gain first, the predictions that could be made, and each change's caveat."""
    pairs: list[tuple[Candidate, Prediction | None]] = []
    for cand in cands:
        pred = None
        if server is not None:
            pred = predictor(server, client, cand) if predictor is not None else None
            pred = pred or observed_prediction(server, cand)
        pairs.append((cand, pred))

    def gain(pair: tuple[Candidate, Prediction | None]) -> float:
        p = pair[1]
        if p is None or p.source != "planner" or not p.before.tok_s_per_gpu or p.after.tok_s_per_gpu is None:
            return 0.0
        return p.after.tok_s_per_gpu / p.before.tok_s_per_gpu - 1

    pairs.sort(key=gain, reverse=True)  # stable: without planner numbers the rule's order stays
    # a prediction may refine its change (the planner picks the radix-off cap that fills memory exactly)
    changes = tuple(p.change if p else c.change for c, p in pairs)
    return changes, tuple(p for _, p in pairs if p is not None), tuple(c.note or "" for c, _ in pairs)


def _verdict(
    rule: Rule,
    finding: Finding,
    servers: tuple[str, ...],
    total: int,
    rep: ServerObs | None,
    client: ClientObs,
    predictor: Predictor | None,
) -> Verdict:
    changes, preds, caveats = _predictions(rep, client, finding.candidates, predictor)
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
        caveats=caveats,
    )


def diagnose(
    obs: Observation,
    spec: DoctorSpec,
    predictor: Predictor | None = None,
    rules: Sequence[Rule] = RULES,
) -> list[Verdict]:
    """Every rule that fires, in table order; a server rule gives one verdict for all servers it matches."""
    verdicts: list[Verdict] = []
    total = len(obs.servers)
    for rule in rules:
        if rule.check_client is not None:
            finding = rule.check_client(obs, spec)
            if finding is not None:
                verdicts.append(_verdict(rule, finding, (), total, None, obs.client, predictor))
            continue
        if rule.check is None:
            continue
        hits = [(s, f) for s in obs.servers if (f := rule.check(s, obs.client, spec)) is not None]
        if hits:
            rep, finding = hits[0]
            urls = tuple(s.url for s, _ in hits)
            verdicts.append(_verdict(rule, finding, urls, total, rep, obs.client, predictor))
    return verdicts


def binding(verdicts: Sequence[Verdict]) -> str | None:
    """The run's binding resource: the first verdict's (the table is in priority order)."""
    return verdicts[0].binds if verdicts else None


class DoctorState:
    """Verdicts shown during a run: one appears after ``confirm`` rounds in a row, and goes after ``confirm``
    rounds without it, so one noisy scrape neither raises nor clears a verdict."""

    def __init__(self, confirm: int = 2) -> None:
        self.confirm = confirm
        self.shown: list[Verdict] = []
        self._seen: dict[str, int] = {}
        self._missed: dict[str, int] = {}
        self._latest: dict[str, Verdict] = {}

    def update(self, verdicts: Sequence[Verdict]) -> bool:
        """Take one round's verdicts; True when the set of shown rules changed."""
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
        order = [r.id for r in RULES]
        keep = [r for r in self._latest if r in before or (self._seen.get(r, 0) >= self.confirm and r in now)]
        self.shown = [self._latest[r] for r in sorted(keep, key=lambda r: order.index(r) if r in order else 99)]
        return [v.rule for v in self.shown] != before
