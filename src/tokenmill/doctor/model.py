"""The doctor's inputs (what was observed) and outputs (verdicts with evidence, advice and predictions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tokenmill.doctor.outputs import WARNING as OUTPUT_WARNING
from tokenmill.doctor.outputs import changes_outputs
from tokenmill.monitor.fleet import ServerView

Severity = Literal["critical", "warning", "info"]
# what a change touches: the server's launch flags (what a fleet re-flag applies), the client's settings, or an
# operator's action (bring a server back)
ChangeKind = Literal["server", "client", "action"]


@dataclass(frozen=True, slots=True)
class ClientSide:
    """What the client knows about one server: its in-flight requests there and its limit."""

    inflight: float | None = None  # mean over the window when known
    limit: int | None = None
    usable: bool = True
    problem: str | None = None  # why the dispatcher set it aside
    timeouts: int = 0  # requests that outlived the read timeout while it was busy (overload), this run
    timeout_age_s: float | None = None  # seconds since the last of them
    read_timeout_s: float | None = None  # the job's retry.read_timeout_s
    abandoned_tokens: float = 0.0  # their output tokens, estimated, thrown away
    work_timeouts: int = 0  # of ``timeouts``, those while the server ran the request (nothing queued)
    last_timeout: str | None = None  # the last one's kind: "queue" or "work"
    read_timeout_now_s: float | None = None  # this server's read timeout now (grown when answers outlived it)
    read_timeout_max_s: float | None = None  # its ceiling (retry.read_timeout_max_s)
    work_cuts: int = 0  # in-flight cuts because answers outlived the read timeout at its ceiling
    errors: int | None = None  # failed requests to it this run (None: the client is not known)
    completed_age_s: float | None = None  # seconds since its last completion (None: none, or not known)


@dataclass(frozen=True, slots=True)
class PlanPoint:
    """A predicted operating point of one server."""

    max_running: int
    tok_s_per_gpu: float | None = None
    binding: str | None = None
    bound: str | None = None  # the decode step's roofline side: "memory" or "compute"
    prefill_share: float | None = None  # share of the GPU's time spent prefilling (planner's dilution)


@dataclass(frozen=True, slots=True)
class ServerObs:
    """One server: the monitor's view, the client's side of it, and the planner's picture of it today (when the
    model and GPU are known: its flags and the observed workload planned)."""

    view: ServerView
    client: ClientSide = field(default_factory=ClientSide)
    plan: PlanPoint | None = None

    @property
    def url(self) -> str:
        return self.view.url


@dataclass(frozen=True, slots=True)
class ClientObs:
    """The client process as a whole."""

    cpu: float | None = None  # share of one core over the last interval
    loop_lag_s: float | None = None  # how late the monitor's timer fired
    avg_prompt_tokens: float | None = None
    avg_output_tokens: float | None = None
    completions_s: float | None = None
    max_tokens: int | None = None  # the job's output limit per request (what SGLang reserves KV for)
    ignore_eos: bool = False  # the job asks for ignore_eos: SGLang reserves each request's whole output
    train_max_length: int | None = None  # the drafter trainer's maximum sequence length (prompt + answer), if given
    answers: int = 0  # answers received (every turn of a conversation counts)
    truncated: int = 0  # of them, cut at max_tokens (finish reason "length")
    completed_p50: float | None = None  # median output tokens of the answers that were not cut
    completed_p90: float | None = None
    upload_pending: int = 0  # sealed shards not yet uploaded (output.remote)
    upload_pending_bytes: int = 0
    upload_oldest_s: float | None = None  # how long the oldest of them has waited
    upload_error: str | None = None  # the store's last error while shards wait
    upload_held: str | None = None  # why generation is paused for the backlog (None: it is not)

    @property
    def truncated_share(self) -> float | None:
        return self.truncated / self.answers if self.answers else None


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything one doctor pass looks at."""

    servers: tuple[ServerObs, ...]
    client: ClientObs = field(default_factory=ClientObs)


MemoryLevel = Literal["low", "moderate", "high"]
MEMORY_LEVELS: tuple[MemoryLevel, ...] = ("low", "moderate", "high")


@dataclass(frozen=True, slots=True)
class MemoryRisk:
    """What a change that touches memory leaves outside SGLang's static pools, against SGLang's own estimate of
    what activations and CUDA graphs need there (its automatic ``--mem-fraction-static`` keeps exactly that)."""

    level: MemoryLevel
    headroom_before_gib: float
    headroom_after_gib: float
    reserve_gib: float

    def text(self) -> str:
        after, before = self.headroom_after_gib, self.headroom_before_gib
        kept = f"{after:.1f} GiB stays outside the pools"
        kept += f" ({before:.1f} today)" if abs(after - before) >= 0.05 else " (as today)"
        return f"out-of-memory risk {self.level}: {kept}, SGLang's own reserve estimate is {self.reserve_gib:.1f} GiB"

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "headroom_before_gib": round(self.headroom_before_gib, 2),
            "headroom_after_gib": round(self.headroom_after_gib, 2),
            "reserve_gib": round(self.reserve_gib, 2),
            "text": self.text(),
        }


@dataclass(frozen=True, slots=True)
class Prediction:
    """What one recommended change is predicted to do, and where the numbers come from.

    ``scope`` says whose throughput the numbers are: one server's (``server``: the change applies to each server
    the verdict names) or the whole fleet's (``fleet``: bringing a dead server back)."""

    change: str  # the flags, as typed
    before: PlanPoint
    after: PlanPoint
    source: Literal["planner", "observed"]
    what: str = "max running"  # what before/after.max_running counts ("running" for a client-side limit)
    note: str | None = None
    scope: Literal["server", "fleet"] = "server"
    memory: MemoryRisk | None = None  # for a change that touches memory: what it leaves outside the pools

    @property
    def gain(self) -> float | None:
        """The predicted throughput gain (0.25 = +25 %); None without throughput on both sides."""
        b, a = self.before.tok_s_per_gpu, self.after.tok_s_per_gpu
        if b is None or a is None or b <= 0:
            return None
        return a / b - 1

    def text(self) -> str:
        b, a = self.before, self.after
        parts = [f"{self.what} {b.max_running} -> {a.max_running}"]
        gain = self.gain
        if gain is not None and b.tok_s_per_gpu is not None and a.tok_s_per_gpu is not None:
            per = "per GPU" if self.scope == "server" else "per GPU of the fleet"
            parts.append(f"{b.tok_s_per_gpu:,.0f} -> {a.tok_s_per_gpu:,.0f} tok/s {per} ({gain * 100:+.0f}%)")
        text = ", ".join(parts) + f" [{self.source}]" + (f" ({self.note})" if self.note else "")
        return text + (f"; {self.memory.text()}" if self.memory is not None else "")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One concrete change a rule proposes: the flags to add or change, and the launch flags after it."""

    change: str  # e.g. "--disable-radix-cache --max-running-requests 512"
    flags_after: tuple[str, ...]  # the whole set of sizing flags after the change (for the planner)
    est_max_running: int | None = None  # an estimate from the observed numbers alone
    note: str | None = None
    running_before: int | None = None  # the server runs only this many today (a client-side limit)
    kind: ChangeKind = "server"
    fill_memory: bool = False  # radix cache off: the planner picks the cap where state and KV run out together
    max_tokens: int | None = None  # a client change of the requests' output limit (planned with it)


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule matching one server (or the client)."""

    summary: str  # the numbers in one line
    evidence: tuple[tuple[str, str], ...]
    advice: str
    candidates: tuple[Candidate, ...] = ()
    severity: Severity = "warning"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule's conclusion over the fleet: which servers, the evidence, what to do and what it should give.

    ``changes`` are best predicted gain first; ``impact`` is the best change's predicted gain of the whole fleet's
    throughput (a server's gain times the share of the fleet the verdict names), the number verdicts are ranked
    by. A verdict without an impact (no change predicted to help, or no prediction) is never the headline."""

    rule: str
    binds: str  # the resource that limits throughput
    title: str
    severity: Severity
    servers: tuple[str, ...]
    of_servers: int
    summary: str
    evidence: tuple[tuple[str, str], ...]
    advice: str
    changes: tuple[str, ...] = ()
    predictions: tuple[Prediction, ...] = ()
    caveats: tuple[str, ...] = ()  # one per change ("" when none): what to know before applying it
    kinds: tuple[ChangeKind, ...] = ()  # one per change: server flags, a client setting, or an action
    impact: float | None = None  # predicted fleet throughput gain of the best change (0.3 = +30 %)

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.rule, self.servers)

    def where(self) -> str:
        if not self.servers:
            return "client"
        if len(self.servers) == 1:
            return self.servers[0]
        return f"{len(self.servers)}/{self.of_servers} servers"

    def prediction(self, change: str) -> Prediction | None:
        return next((p for p in self.predictions if p.change == change), None)

    def kind(self, change: str) -> ChangeKind:
        """What ``change`` touches (server flags unless the rule said otherwise)."""
        if change in self.changes and len(self.kinds) == len(self.changes):
            return self.kinds[self.changes.index(change)]
        return "server"

    def best_change(self) -> str | None:
        """The change the verdict's impact is of: the best predicted gain among the changes that keep the model's
        outputs, else among the others; without a gain, the first change."""
        preds = [p for p in self.predictions if p.gain is not None and p.gain > 0 and p.change in self.changes]
        pool = [p for p in preds if not changes_outputs(p.change)] or preds
        if pool:
            return max(pool, key=lambda p: p.gain or 0.0).change
        return self.changes[0] if self.changes else None

    def line(self) -> str:
        """One line for the dashboard and the log."""
        text = f"{self.title} ({self.where()}): {self.summary}"
        best = self.best_change()
        if best is not None:
            text += f" -> {best}"
            pred = self.prediction(best)
            if pred is not None:
                text += f" ({pred.text()})"
            if changes_outputs(best):
                text += f" [{OUTPUT_WARNING}]"
        if self.impact is None and self.binds:  # a verdict about the corpus (no binds) predicts no throughput
            text += " [no change predicted to help]" if self.changes else ""
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "binds": self.binds,
            "title": self.title,
            "severity": self.severity,
            "servers": list(self.servers),
            "of_servers": self.of_servers,
            "summary": self.summary,
            "evidence": [list(e) for e in self.evidence],
            "advice": self.advice,
            "changes": list(self.changes),
            "changes_outputs": [changes_outputs(c) for c in self.changes],
            "output_warning": OUTPUT_WARNING if any(changes_outputs(c) for c in self.changes) else None,
            "caveats": list(self.caveats),
            "kinds": list(self.kinds),
            "impact": None if self.impact is None else round(self.impact, 4),
            "predictions": [
                {
                    "change": p.change,
                    "changes_outputs": changes_outputs(p.change),
                    "source": p.source,
                    "scope": p.scope,
                    "gain": None if p.gain is None else round(p.gain, 4),
                    "before": {"max_running": p.before.max_running, "tok_s_per_gpu": p.before.tok_s_per_gpu},
                    "after": {"max_running": p.after.max_running, "tok_s_per_gpu": p.after.tok_s_per_gpu},
                    "memory_risk": None if p.memory is None else p.memory.as_dict(),
                    "text": p.text(),
                }
                for p in self.predictions
            ],
        }
