"""The corpus and its durable copy: answers cut at max_tokens, uploads behind."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import Candidate, Finding, Observation
from tokenmill.fmt import UNKNOWN, duration, num, pct


def truncation(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    share = c.truncated_share
    if share is None or c.answers < t.truncated_min_answers or share < t.truncated_share:
        return None
    limit = f"{c.max_tokens:,}" if c.max_tokens else UNKNOWN
    want = advice.suggested_max_tokens(c, t.truncated_target)
    lengths = f"median {num(c.completed_p50)}, p90 {num(c.completed_p90)}"
    change = f"--max-tokens {want}" if want is not None else None
    raise_to = f"to about {want:,} (`sampling.max_tokens: {want}` in the job, or {change})" if want else ""
    return Finding(
        summary=f"{share * 100:.1f}% of answers hit max_tokens {limit} ({c.truncated:,} of {c.answers:,}); "
        f"whole answers: {lengths} tokens",
        evidence=(
            ("answers cut at max_tokens", f"{c.truncated:,} of {c.answers:,} ({share * 100:.1f}%)"),
            ("sampling.max_tokens in force", limit),
            ("whole answers' output tokens", lengths),
            ("output tokens per answer (all)", num(c.avg_output_tokens)),
            (
                "suggested max_tokens",
                f"{want:,}: about {pct(t.truncated_target)} cut (log-normal fit of the lengths)" if want else "-",
            ),
        ),
        advice="Answers that hit max_tokens end mid-sentence: the corpus loses the end of the model's real output "
        f"and a drafter learns from answers that stop nowhere. Raise sampling.max_tokens {raise_to}; prompt + "
        "max_tokens must fit the servers' context length, and a larger limit reserves more KV per request at "
        "admission. `tokenmill regenerate JOB.yaml --where truncated --sampling max_tokens=N` answers the cut "
        "ones again.",
        candidates=(Candidate(change=change, flags_after=(), kind="client"),) if change else (),
        severity="critical" if share >= 0.25 else "warning",
    )


def uploads_behind(obs: Observation, t: DoctorSpec) -> Finding | None:
    c = obs.client
    age = c.upload_oldest_s
    if not c.upload_pending or age is None or (age < t.upload_behind_s and not c.upload_held):
        return None
    held = c.upload_held or "no"
    return Finding(
        summary=f"{c.upload_pending:,} sealed shards wait for upload, the oldest for {duration(age)}"
        + (f"; last store error: {c.upload_error}" if c.upload_error else ""),
        evidence=(
            ("shards waiting", f"{c.upload_pending:,} ({num(c.upload_pending_bytes / 1e6)} MB)"),
            ("oldest waiting", duration(age)),
            ("last store error", c.upload_error or "-"),
            ("generation paused", held),
        ),
        advice="The store is not taking the shards as fast as they are sealed: check output.remote's reachability "
        "and credentials (the last error above). Nothing is lost: shards stay on the local disk and upload as soon "
        "as the store answers. `output.upload.max_backlog` pauses generation past a backlog, so a long outage does "
        "not fill the disk.",
        severity="critical" if c.upload_error else "warning",
    )
