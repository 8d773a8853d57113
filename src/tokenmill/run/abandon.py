"""Requests given up on a read timeout while their server was busy: the tokens thrown away, a prompt abandoned
again and again, and the one case such a prompt is failed (its answer outlives even the read timeout's ceiling).

A request abandoned in a queue decoded nothing while it waited, so its tokens are an upper bound: its time x the
per-request rate of the server's completions, at most ``max_tokens``. A prompt abandoned
``retry.abandoned_report_after`` times is named in the log once and counted; one that timed out while its server
ran it with the read timeout at its ceiling spends an attempt each time, so it ends as a failure after
``max_attempts`` with what to change, never retried without end.
"""

from __future__ import annotations

import logging

from tokenmill.config import RetrySpec
from tokenmill.errors import RequestTimeout
from tokenmill.run.work import DispatchStats, Work

log = logging.getLogger(__name__)


def wasted_tokens(spent_s: float, rate: float | None, max_tokens: int | None) -> float:
    """The output tokens an abandoned request is counted for (see the module docstring)."""
    tokens = spent_s * rate if rate is not None else 0.0
    return min(tokens, float(max_tokens)) if max_tokens is not None else tokens


def note_abandoned(work: Work, stats: DispatchStats, retry: RetrySpec) -> None:
    """Count one more abandonment of ``work``'s prompt; name it once it reaches ``abandoned_report_after``."""
    work.abandoned += 1
    if work.abandoned != retry.abandoned_report_after:
        return
    stats.repeatedly_abandoned += 1
    stats.repeated_ids.append(work.prompt.id)
    log.warning(
        "prompt %s was abandoned on read timeouts %d times (its answer may be longer than the read timeout "
        "allows); it is sent again, and failed once it outlives retry.read_timeout_max_s %d times",
        work.prompt.id,
        work.abandoned,
        retry.max_attempts,
    )


def past_ceiling(
    work: Work, server: str, ran: bool, timeout_s: float, ceiling_s: float, retry: RetrySpec
) -> RequestTimeout | None:
    """The failure to record when ``work``'s answer has outlived the read timeout's ceiling ``max_attempts`` times
    while its server ran it (``ran``); None while it may be sent again."""
    if ran and timeout_s >= ceiling_s:
        work.strikes += 1  # the answer outlives even the ceiling: it must not be retried without end
    if work.strikes < retry.max_attempts:
        return None
    return RequestTimeout(
        f"no answer within the read timeout's ceiling ({ceiling_s:,.0f} s, retry.read_timeout_max_s) while the "
        f"server ran it, {work.strikes} times: raise retry.read_timeout_max_s or lower sampling.max_tokens, "
        "then run `tokenmill retry-failed`",
        server=server,
    )
