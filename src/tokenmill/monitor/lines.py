"""One tick of a run in words: the status line of logs, and the phrases every view shares (the dashboard, the
live page, the summary, ``tokenmill status`` and the report say the expected share, the time scale, the waste, the
upload backlog and the truncation the same way)."""

from __future__ import annotations

from tokenmill.fmt import UNKNOWN, duration
from tokenmill.monitor.snapshot import Snapshot


def status_line(snap: Snapshot) -> str:
    """One concise line for logs (nohup, CI)."""
    total = f"/{snap.total}" if snap.total is not None else ""
    usable = sum(1 for r in snap.servers if r.usable)
    server = f" (servers decode {snap.decode_tok_s:,.0f})" if snap.decode_tok_s is not None else ""
    scaled = time_scale_text(snap)
    server += f" [{scaled}]" if scaled else ""
    counted = counts_text(snap)
    line = (
        f"done {snap.done}{total} | {snap.comp_s:.1f} compl/s | {snap.client_tok_s:.0f} out tok/s{server} | "
        f"in flight {snap.inflight} | failed {snap.failed} | retries {snap.retries} | "
        f"{counted + ' | ' if counted else ''}"
        f"servers {usable}/{len(snap.servers)} | elapsed {duration(snap.elapsed_s)} | "
        f"ETA {duration(snap.eta_s)}"
    )
    cut = truncation(snap)
    if cut:
        line += f" | {cut}"
    for part in (waste_text(snap), upload_text(snap)):
        if part:
            line += f" | {part}"
    if snap.held:
        line += f" | PAUSED: {snap.held}"
    expected = expected_text(snap)
    if expected:
        line += f" | {expected}"
    if snap.waiting:
        line += " | WAITING: no server is usable"
    if snap.verdicts:
        line += f" | doctor: {snap.verdicts[0].title} ({snap.verdicts[0].where()})"
    if snap.autotune:
        line += f" | {snap.autotune}"
    return line


def expected_text(snap: Snapshot, over_run: bool = False) -> str:
    """``62% of expected (rtx-pro-6000), 31% of the roofline`` (empty while the planner has no picture): the last
    window's rate, or with ``over_run`` the run's (``... over the run``, what a summary shows)."""
    shares = snap.expected_shares(over_run)
    if shares is None:
        return ""
    gpus = sorted({r.gpu for r in snap.servers if r.gpu and r.expected_share is not None})
    on = f" ({', '.join(gpus)})" if gpus else ""
    when = " over the run" if over_run else ""
    text = f"{shares[0] * 100:.0f}% of expected{on}{when}, {shares[1] * 100:.0f}% of the roofline"
    other = [r for r in snap.servers if r.compare_tok_s and r.decode_tok_s is not None]
    names = sorted({r.compare_gpu for r in other if r.compare_gpu})
    if other and names:
        elapsed = max(snap.elapsed_s, 1e-9)
        rate = sum((r.decoded_tokens / elapsed) if over_run else (r.decode_tok_s or 0.0) for r in other)
        share = rate / sum(r.compare_tok_s or 0.0 for r in other)
        text += f", {share * 100:.0f}% of {' / '.join(names)} (the same workload planned on it)"
    return text


def time_scale_text(snap: Snapshot) -> str:
    """``time-scaled: twins at time scale 0.02 run at 50x the GPU's rates`` when any server is a time-scaled twin
    (its tok/s, and the client's, are on the twin's clock), else empty."""
    scales = sorted({r.time_scale for r in snap.servers if r.time_scale and r.time_scale != 1.0})
    if not scales:
        return ""
    each = ", ".join(f"{s:g}" for s in scales)
    speed = ", ".join(f"{1 / s:.3g}x" for s in scales)
    return f"time-scaled: twins at time scale {each} run at {speed} the GPU's rates"


def scaled(text: str, note: str | None) -> str:
    """A rate as shown, with the time-scale note when the servers are time-scaled twins."""
    return f"{text} ({note})" if note and text != UNKNOWN else text


def waste_text(snap: Snapshot) -> str:
    """``abandoned 12 on timeouts (~23,400 tokens wasted)`` (empty when none was)."""
    if not snap.abandoned:
        return ""
    return f"abandoned {snap.abandoned:,} on timeouts (~{snap.abandoned_tokens:,.0f} tokens wasted)"


def upload_text(snap: Snapshot) -> str:
    """``upload: 3 shard(s) waiting (12.0 MB), oldest 4m10s; store error: ...`` (empty when nothing waits)."""
    if not snap.upload_pending:
        return ""
    size = f" ({snap.upload_pending_bytes / 1e6:,.1f} MB)" if snap.upload_pending_bytes else ""
    line = f"upload: {snap.upload_pending:,} shard(s) waiting{size}, oldest {duration(snap.upload_oldest_s)}"
    if snap.upload_error:
        line += f"; store error: {snap.upload_error}"
    return line


def truncation(snap: Snapshot) -> str:
    """``truncated 64.5% at max_tokens 2,048`` (empty before the first answer)."""
    share = snap.truncated_share
    if share is None:
        return ""
    limit = f" at max_tokens {snap.max_tokens:,}" if snap.max_tokens else ""
    return f"truncated {share * 100:.1f}%{limit}"


def cut_text(truncated: int, answers: int, max_tokens: int | None) -> str:
    """``64.5% (1,290 of 2,000 answers) at max_tokens 2,048`` for the summary and the report (``-``: no answer)."""
    if not answers:
        return "-"
    limit = f" at max_tokens {max_tokens:,}" if max_tokens else ""
    return f"{truncated / answers * 100:.1f}% ({truncated:,} of {answers:,} answers){limit}"


def counts_text(snap: Snapshot) -> str:
    """``started 1,234, shed 5``: the metric table's run counters without a field of their own (empty: none)."""
    return ", ".join(f"{name.replace('_', ' ')} {value:,.0f}" for name, value in sorted(snap.counts.items()))
