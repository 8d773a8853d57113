"""η fitted continuously: the bandwidth efficiency each server's own decode samples imply, round by round.

``tokenmill calibrate`` fits η (``planner/calibrate.py``) to a window of one server's scrapes. During a run the
same fit runs on the samples the monitor scrapes anyway: each round every healthy server the planner can plan adds
its (running, ``gen_throughput``, ``decode_sum_seq_lens``) sample (a twin's throughput taken back to the GPU's
clock), the last ``MAX_SAMPLES`` distinct ones are kept, and η is fitted again against the planner's capacity of
the server as it runs. :meth:`EtaFit.changed` says which servers' η moved by more than ``REPORT_CHANGE`` since it
was last recorded, for the run's event log (``eta`` records: ``plan --eta`` and the twin's ``--eta-bw`` take it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tokenmill.doctor.model import ClientObs, ServerObs
from tokenmill.doctor.predict import PlannerPredictor
from tokenmill.errors import InputError
from tokenmill.planner.calibrate import ThroughputSample, fit_eta

MAX_SAMPLES = 60
MIN_SAMPLES = 4  # a fit on fewer says little
REPORT_CHANGE = 0.02  # a recorded eta is written again when it moves by more than this share


@dataclass(frozen=True, slots=True)
class EtaEstimate:
    """One server's fitted eta and what it rests on."""

    url: str
    eta_bw: float
    samples: int
    rms_log_error: float
    assumed: float  # the eta the planner's expectations use (planner.capacity.default_eta for the GPU)

    def as_dict(self) -> dict[str, object]:
        return {
            "server": self.url,
            "eta_bw": round(self.eta_bw, 4),
            "samples": self.samples,
            "rms_log_error": round(self.rms_log_error, 4),
            "assumed_eta_bw": self.assumed,
        }


class EtaFit:
    """Per-server decode samples and the eta fitted to them."""

    def __init__(self, predictor: PlannerPredictor) -> None:
        self.predictor = predictor
        self._samples: dict[str, deque[ThroughputSample]] = {}
        self.estimates: dict[str, EtaEstimate] = {}
        self._recorded: dict[str, float] = {}

    def update(self, servers: tuple[ServerObs, ...], client: ClientObs) -> None:
        """Add this round's samples and fit again (blocking: run it on a worker thread)."""
        for obs in servers:
            snap, info = obs.view.snapshot, obs.view.info
            if not obs.view.healthy or snap is None or not snap.running or not snap.gen_throughput:
                continue
            scale = info.time_scale if info is not None and info.time_scale else 1.0
            ctx = round(snap.sum_seq_lens) if snap.sum_seq_lens else None
            sample = ThroughputSample(round(snap.running), snap.gen_throughput * scale, ctx)
            kept = self._samples.setdefault(obs.url, deque(maxlen=MAX_SAMPLES))
            if kept and kept[-1] == sample:
                continue  # the gauges refresh every few decode steps: a repeat is not a new sample
            kept.append(sample)
            if len(kept) < MIN_SAMPLES:
                continue
            cap = self.predictor.capacity(obs, client)
            if cap is None:
                continue
            avg = obs.view.avg_context
            try:
                fit = fit_eta(cap, kept, avg)
            except InputError:
                continue
            assumed = cap.roofline.eta_bw
            self.estimates[obs.url] = EtaEstimate(obs.url, fit.eta_bw, fit.used, fit.rms_log_error, assumed)

    def changed(self) -> list[EtaEstimate]:
        """Estimates to record: first seen, or moved by more than REPORT_CHANGE since last recorded."""
        out = []
        for url, est in self.estimates.items():
            last = self._recorded.get(url)
            if last is None or abs(est.eta_bw / last - 1) > REPORT_CHANGE:
                self._recorded[url] = est.eta_bw
                out.append(est)
        return out
