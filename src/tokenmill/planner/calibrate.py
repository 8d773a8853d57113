"""Fit the bandwidth efficiency eta from a live server's measured decode throughput.

A sample is (running requests, generation tokens/s, optionally the tokens they hold), read from SGLang's
``/metrics`` (``sglang:num_running_reqs``, ``sglang:gen_throughput``, ``sglang:decode_sum_seq_lens``),
from its scheduler log ("Decode batch, #running-req: N, ... gen throughput (token/s): X"), or from JSON
lines. Each sample's measured step time is ``B / T``; the roofline predicts
``max(bytes / (eta * BW), flops / (eta_c * F)) + t_fixed``, the per-request share of the bytes weighed by
``1 / eta_request_ratio`` (so eta scales both streams and the ratio stays as configured).
:func:`fit_eta` picks the eta that minimizes the squared log error of predicted vs measured throughput
over the memory-bound samples. Parsing is pure (strings in, samples out); scraping and file reading live
in :mod:`tokenmill.monitor.samples`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tokenmill.errors import InputError
from tokenmill.planner.capacity import ServerCapacity

ETA_MIN = 0.02
ETA_MAX = 1.0


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    """One observation of a replica in decode."""

    running: int
    gen_tok_s: float
    context_tokens: int | None = None  # sum of the running requests' lengths, when the server reports it


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fitted eta and how well it explains the samples."""

    eta_bw: float
    used: int
    skipped: int
    implied: tuple[float, ...]  # eta implied by each used sample on its own
    rms_log_error: float  # of predicted vs measured throughput at the fitted eta
    notes: tuple[str, ...] = ()

    @property
    def implied_range(self) -> tuple[float, float]:
        return (min(self.implied), max(self.implied)) if self.implied else (math.nan, math.nan)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.implied_range
        return {
            "eta_bw": self.eta_bw,
            "samples_used": self.used,
            "samples_skipped": self.skipped,
            "implied_min": lo,
            "implied_max": hi,
            "rms_log_error": self.rms_log_error,
            "notes": list(self.notes),
        }


def average_context(input_len: float | None, output_len: float | None) -> float | None:
    """The tokens a running request holds on average (its prompt and half its answer), when both are known."""
    return input_len + output_len / 2 if input_len is not None and output_len is not None else None


_RUNNING = "sglang:num_running_reqs"
_THROUGHPUT = "sglang:gen_throughput"
_SEQ_LENS = "sglang:decode_sum_seq_lens"


def samples_from_metrics(text: str) -> list[ThroughputSample]:
    """Samples from one Prometheus exposition of SGLang's ``/metrics``: one per DP rank (TP rank 0)."""
    values: dict[str, dict[str, float]] = {_RUNNING: {}, _THROUGHPUT: {}, _SEQ_LENS: {}}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise InputError(f"the /metrics response is not Prometheus text: {exc}") from exc
    for family in families:
        for sample in family.samples:
            name = sample.name if sample.name.startswith("sglang:") else f"sglang:{sample.name}"
            if name not in values or sample.labels.get("tp_rank", "0") != "0":
                continue
            rank = sample.labels.get("dp_rank", "0")
            values[name].setdefault(rank, sample.value)
    out = []
    for rank, running in sorted(values[_RUNNING].items()):
        if rank in values[_THROUGHPUT]:
            ctx = values[_SEQ_LENS].get(rank)
            out.append(ThroughputSample(int(running), values[_THROUGHPUT][rank], int(ctx) if ctx else None))
    return out


_DECODE_RE = re.compile(r"Decode batch.*?#running-req: (?P<running>\d+)")
_TOKENS_RE = re.compile(r"#(?:full )?token: (?P<tokens>\d+)")
_GEN_RE = re.compile(r"gen throughput \(token/s\): (?P<tok_s>[0-9.]+)")


def samples_from_log(lines: Iterable[str]) -> list[ThroughputSample]:
    """Samples from SGLang scheduler log lines ("Decode batch, ...") or JSON lines.

    A JSON line holds ``running`` (or ``num_running_reqs``), ``gen_throughput`` (or ``gen_tok_s``) and
    optionally ``context_tokens`` (or ``decode_sum_seq_lens``). In log lines the used KV tokens
    (``#token`` / ``#full token``) stand in for the running requests' lengths.
    """
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("{"):
            sample = _sample_from_json(stripped)
            if sample is not None:
                out.append(sample)
            continue
        m = _DECODE_RE.search(stripped)
        gen = _GEN_RE.search(stripped)
        if m and gen:
            tok = _TOKENS_RE.search(stripped)
            out.append(ThroughputSample(int(m["running"]), float(gen["tok_s"]), int(tok["tokens"]) if tok else None))
    return out


def _sample_from_json(line: str) -> ThroughputSample | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(row, dict):
        return None
    running = row.get("running", row.get("num_running_reqs"))
    tok_s = row.get("gen_throughput", row.get("gen_tok_s"))
    ctx = row.get("context_tokens", row.get("decode_sum_seq_lens"))
    if not isinstance(running, int | float) or not isinstance(tok_s, int | float):
        return None
    return ThroughputSample(int(running), float(tok_s), int(ctx) if isinstance(ctx, int | float) and ctx else None)


def usable(samples: Iterable[ThroughputSample]) -> list[ThroughputSample]:
    """Drop idle samples and consecutive repeats (the gauges refresh only every 40 decode steps)."""
    out: list[ThroughputSample] = []
    for s in samples:
        if s.running < 1 or s.gen_tok_s <= 0:
            continue
        if out and out[-1] == s:
            continue
        out.append(s)
    return out


def _context(sample: ThroughputSample, avg_context: float | None) -> int | None:
    if sample.context_tokens is not None:
        return sample.context_tokens
    return None if avg_context is None else round(sample.running * avg_context)


def _implied_eta(cap: ServerCapacity, sample: ThroughputSample, context: int) -> float | None:
    """The eta that alone explains this sample, or None when it is compute-bound or faster than t_fixed."""
    st = cap.step(sample.running, context)
    available = sample.running / sample.gen_tok_s - st.t_fixed_s
    if available <= 0 or st.t_compute_s >= available:
        return None
    return st.effective_bytes / (cap.cost.bandwidth * available)


def _log_error(cap: ServerCapacity, eta: float, points: list[tuple[ThroughputSample, int]]) -> float:
    total = 0.0
    for sample, context in points:
        st = cap.step(sample.running, context)
        t = max(st.effective_bytes / (eta * cap.cost.bandwidth), st.t_compute_s) + st.t_fixed_s
        total += (math.log(sample.running / t) - math.log(sample.gen_tok_s)) ** 2
    return total


def fit_eta(cap: ServerCapacity, samples: Iterable[ThroughputSample], avg_context: float | None) -> Calibration:
    """Least-squares (in log throughput) eta over the memory-bound samples, by golden-section search."""
    points: list[tuple[ThroughputSample, int]] = []
    implied: list[float] = []
    skipped = 0
    notes: list[str] = []
    for s in usable(samples):
        ctx = _context(s, avg_context)
        if ctx is None:
            skipped += 1
            continue
        eta = _implied_eta(cap, s, ctx)
        if eta is None:
            skipped += 1
            continue
        points.append((s, ctx))
        implied.append(eta)
    if not points:
        raise InputError(
            "no usable decode samples: the server was idle, compute-bound, or reported no token counts "
            "(give --input-len/--output-len so the planner can assume them)"
        )
    lo, hi = ETA_MIN, ETA_MAX
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        a = hi - ratio * (hi - lo)
        b = lo + ratio * (hi - lo)
        if _log_error(cap, a, points) <= _log_error(cap, b, points):
            hi = b
        else:
            lo = a
    eta = (lo + hi) / 2
    if any(e > ETA_MAX for e in implied):
        notes.append(
            "some samples are faster than the roofline allows at eta=1: check the model, GPU, flags and t_fixed"
        )
    rms = math.sqrt(_log_error(cap, eta, points) / len(points))
    return Calibration(eta, len(points), skipped, tuple(implied), rms, tuple(notes))
