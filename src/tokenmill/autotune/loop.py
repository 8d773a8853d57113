"""``--autotune``: the doctor's advice applied to a live fleet, measured, and kept only when it pays.

Each scrape round the :class:`Autotuner` is handed the servers' views and the doctor's shown (confirmed) verdicts,
ranked by predicted impact. One change at a time:

1. **propose**: the best server-flag change of the ranked verdicts whose planner prediction (on the server's
   real flags, with no mismatch between the planner's picture and the server) raises a server's throughput by
   at least ``min_predicted_gain``, that the profile's allow-list permits and that was not tried before; the
   verdict must name at least ``min_verdict_share`` of the live servers (the fleet runs one profile), the run
   must have at least ``min_remaining_s`` to go, and the canary and its peers must have been watched, up, for a
   whole window;
2. **canary**: the change is applied to one server through the rolling re-flag (drained, restarted, taken
   back); after ``warmup_s`` (and a request lifetime) its decode rate is measured for ``window_s``;
3. **decide**: the canary's gain against its peers meanwhile (against its own before when it has none) must
   clear ``keep_gain`` by ``confidence_z`` standard errors to be kept; one that cannot is rolled back; one in
   between is measured longer, up to ``max_window_s``, then rolled back;
4. **roll out** a kept change to the other servers (``rollout_batch`` at a time), or **roll back** the canary;
   then ``cooldown_s`` before the next change, at most ``max_changes`` in all.

Every step goes to ``emit`` (the run's event log: ``autotune`` records) and the log; :meth:`Autotuner.status`
is the dashboard's line. The fleet is reached through an :class:`Actuator` (``tokenmill.autotune.actuators`` has
the fleet's); its calls block (drains and restarts take minutes) and run on a worker thread, so a round never
waits. The re-flag drains a server before restarting it and a run retries what was still in flight elsewhere
without spending an attempt: no prompt is lost or done twice. ``dry_run`` says what it would do and does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from tokenmill.autotune.measure import RateHistory, measure
from tokenmill.autotune.tuning import Actuator, Background, Change, Phase
from tokenmill.config import AutotuneSpec
from tokenmill.doctor.model import MEMORY_LEVELS, Prediction, Verdict
from tokenmill.fmt import duration
from tokenmill.monitor.fleet import ServerView

__all__ = ["Actuator", "Autotuner", "Change", "Phase"]

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
MIN_PARTS = 3  # a window's noise is judged on at least this many parts of two scrapes or more each


class Autotuner:
    """The controller (see the module docstring); feed it every scrape round with :meth:`round`."""

    def __init__(
        self,
        spec: AutotuneSpec,
        actuator: Actuator,
        *,
        emit: Emit | None = None,
        refresh: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.actuator = actuator
        self.emit = emit or (lambda record: None)
        self.refresh = refresh or (lambda url: None)
        self.clock = clock
        keep = spec.window_s + spec.max_window_s + spec.warmup_s + 3600.0  # drains and restarts fit in the hour
        self.history = RateHistory(keep)
        self.phase = Phase.WATCHING
        self.changes: list[Change] = []
        self.current: Change | None = None
        self._job: Background | None = None
        self._tried: set[str] = set()
        self._noted: set[str] = set()
        self._until = 0.0  # end of the warm-up, the window or the cool-down
        self._before: tuple[float, float] = (0.0, 0.0)
        self._after_start = 0.0
        self._lifetime: float | None = None
        self._stopped = False

    def bind(self, *, emit: Emit, refresh: Callable[[str], None]) -> None:
        """Where steps are recorded (the run's event log) and how a re-flagged server's set-up is re-read."""
        self.emit, self.refresh = emit, refresh

    # ---- the round ------------------------------------------------------------------------------------

    def round(self, views: Sequence[ServerView], verdicts: Sequence[Verdict], eta_s: float | None = None) -> None:
        """One scrape round: the servers' views and the doctor's shown verdicts (ranked)."""
        if self._stopped:
            return
        now = self.clock()
        self.history.add(now, views)
        if self.phase in (Phase.APPLYING, Phase.ROLLING_OUT, Phase.ROLLING_BACK):
            self._after_job(now)
        if self.phase is Phase.WARMUP and now >= self._until:
            self.phase = Phase.MEASURING
            self._after_start = now
            self._until = now + self.spec.window_s
        if self.phase is Phase.MEASURING and now >= self._until:
            self._decide(now)
        if self.phase is Phase.COOLDOWN and now >= self._until:
            self.phase = Phase.WATCHING
        if self.phase is Phase.WATCHING:
            self._propose(now, views, verdicts, eta_s)

    # ---- proposing ------------------------------------------------------------------------------------

    def _note(self, change: str, why: str, text: str) -> None:
        """Say once why a change is not tried (the reason holds round after round, while the change's numbers
        move): one note per reason and set of flags."""
        key = f"{why}: {' '.join(sorted(w for w in change.split() if w.startswith('--')))}"
        if key not in self._noted:
            self._noted.add(key)
            log.info("autotune: %s", text)
            self.emit({"step": "note", "change": change, "text": text})

    def _candidate(self, verdicts: Sequence[Verdict], live: set[str]) -> tuple[Verdict, str, Prediction] | None:
        for v in verdicts:
            if v.impact is None or not v.servers:
                continue
            for change in v.changes:
                pred = v.prediction(change)
                if v.kind(change) != "server" or pred is None or pred.source != "planner" or pred.gain is None:
                    continue
                if pred.gain < self.spec.min_predicted_gain or change in self._tried:
                    continue
                if pred.note is not None:
                    self._note(change, "mismatch", f"not trying {change}: {pred.note}")
                    continue
                refused = self.actuator.refuse(change)
                if refused is not None:
                    self._note(change, "refused", f"not trying {change} (predicted {pred.gain:+.0%}): {refused}")
                    continue
                if pred.memory is not None and MEMORY_LEVELS.index(pred.memory.level) > MEMORY_LEVELS.index(
                    self.spec.max_memory_risk
                ):
                    self._note(
                        change,
                        "memory",
                        f"not trying {change} (predicted {pred.gain:+.0%}): {pred.memory.text()} "
                        "(autotune.max_memory_risk)",
                    )
                    continue
                if len(live & set(v.servers)) < self.spec.min_verdict_share * len(live):
                    self._note(
                        change,
                        "share",
                        f"not trying {change} yet: {v.title} holds on {v.where()} only (autotune.min_verdict_share)",
                    )
                    continue
                return v, change, pred
        return None

    def _propose(
        self, now: float, views: Sequence[ServerView], verdicts: Sequence[Verdict], eta_s: float | None
    ) -> None:
        if len(self.changes) >= self.spec.max_changes:
            self.phase = Phase.DONE
            return
        by_url = {v.url: v for v in views}
        fleet = [u for u in self.actuator.servers() if u in by_url]
        live = {u for u in fleet if by_url[u].healthy}
        found = self._candidate(verdicts, live)
        if found is None:
            return
        verdict, change, pred = found
        if eta_s is not None and eta_s < self.spec.min_remaining_s:
            self._note(
                change,
                "eta",
                f"not trying {change}: the run ends in {duration(eta_s)}, "
                "too soon to pay back (autotune.min_remaining_s)",
            )
            return
        canary = next(u for u in fleet if u in verdict.servers and u in live)
        peers = [u for u in fleet if u != canary and u in live]
        start = now - self.spec.window_s
        if not all(self.history.covers(u, start, now) for u in (canary, *peers)):
            return  # not yet a whole window of steady numbers to compare with
        record = Change(change, verdict.rule, canary, peers, pred.gain or 0.0, now, self.spec.dry_run)
        self.changes.append(record)
        self._tried.add(change)
        view = by_url[canary]
        self._lifetime = view.running / view.requests_s if view.running and view.requests_s else None
        base = {
            "change": change,
            "rule": verdict.rule,
            "canary": canary,
            "predicted_gain": round(record.predicted_gain, 4),
            "prediction": pred.text(),
        }
        if self.spec.dry_run:
            record.outcome = "would apply"
            log.warning("autotune (dry run): would apply %s to %s first (%s)", change, canary, pred.text())
            self.emit({"step": "would-apply", **base, "servers": len(fleet)})
            return
        log.warning("autotune: trying %s on %s (%s)", change, canary, pred.text())
        self.emit({"step": "canary", **base})
        self.current = record
        self._before = (start, now)
        self.phase = Phase.APPLYING
        self._job = Background(lambda: self.actuator.apply(change, [canary], self._say), "tokenmill-autotune")

    def _say(self, text: str) -> None:
        log.info("autotune: %s", text)
        if self.current is not None:
            self.current.notes.append(text)

    # ---- the change's life ------------------------------------------------------------------------------

    def _after_job(self, now: float) -> None:
        job, rec = self._job, self.current
        if job is None or not job.done or rec is None:
            return
        self._job = None
        error = job.error
        if self.phase is Phase.APPLYING:
            if error is not None:
                self._finish(now, "failed", error=str(error))
                return
            self.refresh(rec.canary)
            rec.canary_up_at = now
            warm = max(self.spec.warmup_s, self.spec.warmup_lifetimes * (self._lifetime or 0.0))
            self._until = now + warm
            self.phase = Phase.WARMUP
            self.emit({"step": "canary-up", "change": rec.change, "canary": rec.canary, "warmup_s": round(warm, 1)})
            return
        if self.phase is Phase.ROLLING_OUT:
            for url in rec.peers:
                self.refresh(url)
            if error is not None:
                log.error("autotune: rolling %s out failed (%s); rolling every server back", rec.change, error)
                rec.error = str(error)
                self.emit({"step": "rollout-failed", "change": rec.change, "error": str(error)})
                servers = [rec.canary, *rec.peers]
                self.phase = Phase.ROLLING_BACK
                self._job = Background(lambda: self.actuator.revert(servers, self._say), "tokenmill-autotune")
                return
            self._finish(now, "kept")
            return
        self.refresh(rec.canary)
        if error is not None:
            log.error("autotune: rolling %s back failed: %s", rec.change, error)
        self._finish(now, "rolled back", error=None if error is None else str(error))

    def _decide(self, now: float) -> None:
        rec = self.current
        assert rec is not None
        spec = self.spec
        parts = min(spec.sub_windows, self.history.scrapes(rec.canary, self._after_start, now) // 2)
        if parts < MIN_PARTS and now - self._after_start < spec.max_window_s:
            self._until = now + spec.window_s  # too few scrapes in the window to see its noise: measure longer
            return
        m = measure(self.history, rec.canary, rec.peers, self._before, (self._after_start, now), max(1, parts))
        canary_up = self.history.covers(rec.canary, self._after_start, now)
        rec.measured = m
        verdict = "rolled back"
        if m is not None and canary_up:
            if m.low(spec.confidence_z) >= spec.keep_gain:
                verdict = "keep"
            elif m.high(spec.confidence_z) >= spec.keep_gain and now - self._after_start < spec.max_window_s:
                extend = min(spec.window_s, spec.max_window_s - (now - self._after_start))
                self._until = now + extend
                self.emit({"step": "extended", "change": rec.change, "measured": m.as_dict(), "more_s": extend})
                return
        rec.decided_at = now
        measured = m.as_dict() if m is not None else None
        base = {"change": rec.change, "canary": rec.canary, "predicted_gain": round(rec.predicted_gain, 4)}
        if verdict == "keep":
            assert m is not None
            log.warning(
                "autotune: %s measured %+.0f%% (predicted %+.0f%%): keeping it, rolling it out to %d more server(s)",
                rec.change, m.gain * 100, rec.predicted_gain * 100, len(rec.peers),
            )  # fmt: skip
            self.emit({"step": "keep", **base, "measured": measured, "servers": len(rec.peers)})
            self.phase = Phase.ROLLING_OUT
            peers = list(rec.peers)
            self._job = Background(lambda: self.actuator.apply(rec.change, peers, self._say), "tokenmill-autotune")
            return
        why = "the canary went down during the measurement" if not canary_up else "it does not pay"
        if m is None and canary_up:
            why = "no rates to measure it by"
        log.warning(
            "autotune: %s measured %s (predicted %+.0f%%): %s; rolling it back",
            rec.change, "?" if m is None else f"{m.gain:+.0%}", rec.predicted_gain * 100, why,
        )  # fmt: skip
        self.emit({"step": "roll-back", **base, "measured": measured, "reason": why})
        self.phase = Phase.ROLLING_BACK
        self._job = Background(lambda: self.actuator.revert([rec.canary], self._say), "tokenmill-autotune")

    def _finish(self, now: float, outcome: str, error: str | None = None) -> None:
        rec = self.current
        assert rec is not None
        rec.outcome, rec.finished_at = outcome, now
        rec.error = rec.error or error
        step = {"kept": "rolled-out", "rolled back": "rolled-back", "failed": "failed"}[outcome]
        self.emit(
            {
                "step": step,
                "change": rec.change,
                "outcome": outcome,
                "predicted_gain": round(rec.predicted_gain, 4),
                "measured": rec.measured.as_dict() if rec.measured is not None else None,
                "error": rec.error,
            }
        )
        log.warning("autotune: %s %s%s", rec.change, outcome, f" ({rec.error})" if rec.error else "")
        self.current = None
        self.phase = Phase.COOLDOWN
        self._until = now + self.spec.cooldown_s

    # ---- display ------------------------------------------------------------------------------------------

    def status(self) -> str | None:
        """One line for the dashboard."""
        now = self.clock()
        rec = self.current
        kept = [c for c in self.changes if c.outcome == "kept"]
        if self.phase is Phase.WATCHING:
            if not self.changes:
                return "autotune: watching"
            last = self.changes[-1]
            return f"autotune: watching; last: {last.change} {last.outcome}"
        if self.phase is Phase.DONE:
            return f"autotune: done ({len(self.changes)} change(s), {len(kept)} kept)"
        if self.phase is Phase.COOLDOWN:
            last = self.changes[-1]
            return f"autotune: {last.change} {last.outcome}; next look in {duration(max(0.0, self._until - now))}"
        assert rec is not None
        pred = f"predicted {rec.predicted_gain:+.0%}"
        if self.phase is Phase.APPLYING:
            return f"autotune: applying {rec.change} to canary {rec.canary} ({pred})"
        if self.phase is Phase.WARMUP:
            left = duration(max(0.0, self._until - now))
            return f"autotune: canary {rec.canary} up with {rec.change}; measuring in {left}"
        if self.phase is Phase.MEASURING:
            left = duration(max(0.0, self._until - now))
            return f"autotune: measuring {rec.change} on {rec.canary} ({pred}), {left} to go"
        measured = f"measured {rec.measured.gain:+.0%}, " if rec.measured is not None else ""
        if self.phase is Phase.ROLLING_OUT:
            return f"autotune: {rec.change} {measured}{pred}: rolling out to {len(rec.peers)} server(s)"
        return f"autotune: {rec.change} {measured}{pred}: rolling back"

    def stop(self) -> None:
        """The run is over: no further rounds; a change under way is reported as interrupted."""
        if self._stopped:
            return
        self._stopped = True
        if self.current is not None:
            self.emit({"step": "interrupted", "change": self.current.change, "phase": self.phase.value})
            log.warning("autotune: the run ended while %s was %s", self.current.change, self.phase.value)

    def settle(self) -> None:
        """Blocking, for a tuner that stops while the fleet stays up: a re-flag under way finishes, and a canary
        that runs a change not yet decided goes back to the fleet's flags (the fleet is left on one profile)."""
        self._stopped = True
        rec = self.current
        if self._job is not None:
            self._job.wait()
        if rec is None or self.phase in (Phase.ROLLING_OUT, Phase.ROLLING_BACK, Phase.DONE, Phase.COOLDOWN):
            return
        if self.phase is Phase.APPLYING and self._job is not None and self._job.error is not None:
            return
        self.emit({"step": "abandoned", "change": rec.change, "canary": rec.canary, "phase": self.phase.value})
        self.actuator.revert([rec.canary], self._say)
        rec.outcome = "abandoned"

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for a re-flag under way to end (tests, ``fleet tune`` on its way out)."""
        job = self._job
        return job is None or job.wait(timeout)
