"""Answers cut at max_tokens: counted per answer, shown on every display, the doctor's verdict with a max_tokens
fitted to the lengths seen; what a trainer's maximum length would cut (inspect's corpus, plan's workload)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from tokenmill.config import DoctorSpec, JobSpec
from tokenmill.doctor import ClientObs, Observation, diagnose
from tokenmill.doctor.advice import suggested_max_tokens
from tokenmill.histogram import Histogram
from tokenmill.monitor.client import OUTPUT_LEN_BUCKETS, ClientMetrics
from tokenmill.monitor.lines import status_line
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.planner.plan import Workload, train_cut
from tokenmill.quality.corpus import inspect_records
from tokenmill.records import RequestOutcome
from tokenmill.records.read import CompletionRecord
from tokenmill.run.summary import Summary

URL = "http://s:1"


def _metrics(lengths: list[int], limit: int) -> ClientMetrics:
    m = ClientMetrics([URL])
    for n in lengths:
        cut = n >= limit
        m.observe(RequestOutcome(URL, 1.0, True, 10, min(n, limit), "length" if cut else "stop", None))
    return m


def _lognormal(n: int, mean: float, sigma: float, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    mu = math.log(mean) - sigma * sigma / 2
    return [max(1, round(rng.lognormvariate(mu, sigma))) for _ in range(n)]


def test_the_default_max_tokens_is_chosen_for_a_training_corpus() -> None:
    spec = JobSpec.model_validate({"input": {"path": "x.jsonl"}, "servers": ["http://s:1"], "output": {"dir": "o"}})
    assert spec.sampling.max_tokens == 8192
    assert spec.input.conversation_turns == "all"


def test_histogram_quantile_interpolates_within_a_bucket() -> None:
    h = Histogram(OUTPUT_LEN_BUCKETS)
    for n in range(1, 1001):
        h.observe(n)
    assert h.quantile(0.5) == pytest.approx(500, rel=0.05)
    assert h.quantile(0.9) == pytest.approx(900, rel=0.05)
    assert Histogram(OUTPUT_LEN_BUCKETS).quantile(0.5) is None


def test_client_counts_every_answer_and_the_whole_ones_lengths() -> None:
    m = _metrics([100, 3000, 5000, 200], limit=2048)
    assert (m.answers, m.truncated) == (4, 2)
    assert m.completed_len.count == 2 and m.completed_len.total == 300


def test_the_suggested_max_tokens_cuts_about_the_target_share() -> None:
    """Answers of mean 2,700 and a long tail (sigma 0.8), cut at 2,048: the fit from the share cut and the whole
    answers' median lands where about 1 % of the true lengths lie above it."""
    lengths = _lognormal(20_000, 2700, 0.8)
    m = _metrics(lengths, 2048)
    obs = ClientObs(
        max_tokens=2048, answers=m.answers, truncated=m.truncated, completed_p50=m.completed_len.quantile(0.5)
    )
    want = suggested_max_tokens(obs, 0.01)
    assert want is not None and want % 1024 == 0
    above = sum(1 for n in lengths if n > want) / len(lengths)
    assert 0.003 < above < 0.03, (want, above)
    # without a usable median: twice the limit
    assert suggested_max_tokens(ClientObs(max_tokens=2048, answers=10, truncated=10), 0.01) == 4096


def _verdicts(client: ClientObs, spec: DoctorSpec | None = None) -> dict[str, object]:
    return {v.rule: v for v in diagnose(Observation((), client), spec or DoctorSpec())}


def test_the_doctor_names_max_tokens_past_the_threshold_with_the_lengths_as_evidence() -> None:
    client = ClientObs(
        max_tokens=2048, answers=200, truncated=129, completed_p50=1400.0, completed_p90=1900.0,
        avg_output_tokens=1800.0,
    )  # fmt: skip
    v = diagnose(Observation((), client), DoctorSpec())[0]
    assert v.rule == "truncated" and v.severity == "critical" and v.where() == "client"
    evidence = dict(v.evidence)
    assert evidence["answers cut at max_tokens"] == "129 of 200 (64.5%)"
    assert evidence["sampling.max_tokens in force"] == "2,048"
    assert evidence["whole answers' output tokens"] == "median 1,400, p90 1,900"
    want = suggested_max_tokens(client, DoctorSpec().truncated_target)
    assert v.changes == (f"--max-tokens {want}",) and v.kinds == ("client",)
    assert "sampling.max_tokens" in v.advice and "[no change predicted" not in v.line()
    assert "truncated" not in _verdicts(ClientObs(max_tokens=2048, answers=200, truncated=9))  # 4.5 % < 5 %
    assert "truncated" not in _verdicts(ClientObs(max_tokens=2048, answers=10, truncated=10))  # too few answers
    assert "truncated" in _verdicts(
        ClientObs(max_tokens=2048, answers=200, truncated=9), DoctorSpec(truncated_share=0.04)
    )


def _snapshot(**extra: object) -> Snapshot:
    base: dict[str, object] = dict(
        elapsed_s=10.0, done=200, total=200, completed=200, failed=0, skipped=0, retries=0, inflight=0, comp_s=1.0,
        client_tok_s=1.0, eta_s=None, servers=[], waiting=False, last_failure=None,
    )  # fmt: skip
    return Snapshot(**{**base, **extra})  # type: ignore[arg-type]


def test_status_line_summary_and_event_log_show_the_share_cut() -> None:
    snap = _snapshot(answers=200, truncated=129, max_tokens=2048, rows_read=200, multi_turn_rows=50,
                     conversation_turns="all")  # fmt: skip
    assert "| truncated 64.5% at max_tokens 2,048" in status_line(snap)
    back = Snapshot.from_event(snap.to_event())
    assert (back.answers, back.truncated, back.max_tokens, back.multi_turn_rows) == (200, 129, 2048, 50)
    text = Summary.from_snapshot(
        back, output_dir="o", model="m", api="a", recorded=(200, 0), state="finished"
    ).markdown()
    assert "| answers cut at max_tokens | 64.5% (129 of 200 answers) at max_tokens 2,048 |" in text
    assert "| rows with several user turns | 50 of 200 rows: every user turn regenerated" in text
    assert "truncated" not in status_line(_snapshot())  # before the first answer: nothing to say


def _record(rid: str, prompt: int, completion: int, turns: list[tuple[int, int]] | None = None) -> dict[str, object]:
    rec: dict[str, object] = {"id": rid, "completion": "x" * 80, "finish_reason": "stop",
                              "prompt_tokens": prompt, "completion_tokens": completion}  # fmt: skip
    if turns:
        rec["turns"] = [{"completion": "y", "finish_reason": "stop", "prompt_tokens": p, "completion_tokens": c}
                        for p, c in turns]  # fmt: skip
    return rec


def test_inspect_counts_what_a_train_max_length_cuts() -> None:
    records: list[dict[str, Any]] = [
        _record("a", 100, 900),  # 1,000: fits
        _record("b", 500, 3500),  # 4,000: 2,000 past 2,000
        # a conversation: the last turn's prompt holds every earlier turn and answer, 1,200 + 300 = 1,500
        _record("c", 1600, 800, turns=[(200, 500), (1200, 300)]),
        {"id": "d", "completion": "z", "finish_reason": "stop"},  # no token counts: not judged
    ]
    cut = inspect_records(map(CompletionRecord.from_json, records), "test").train_cut(2000)
    assert (cut.records, cut.cut, cut.tokens, cut.tokens_cut, cut.unknown) == (3, 1, 6500, 2000, 1)
    assert "1 of 3 records (33.3%)" in cut.render() and "2,000 of 6,500 tokens (30.8%)" in cut.render()


def test_plan_train_cut_matches_a_sampled_workload() -> None:
    workload = Workload(prompts=1000, input_len=300, output_len=2700)
    got = train_cut(workload, 4096, 0.8)
    lengths = _lognormal(200_000, 2700, 0.8, seed=3)
    room = 4096 - 300
    records = sum(1 for n in lengths if n > room) / len(lengths)
    tokens = sum(max(0, n - room) for n in lengths) / sum(300 + n for n in lengths)
    assert got.records == pytest.approx(records, abs=0.005)
    assert got.tokens == pytest.approx(tokens, abs=0.003)
    assert train_cut(workload, 200, 0.8).records == 1.0  # shorter than a prompt: every record is cut
