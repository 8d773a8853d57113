"""Verdicts as plain text: the report of `tokenmill doctor`, and the log lines of a run."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.doctor.engine import headline, rank
from tokenmill.doctor.model import Verdict
from tokenmill.monitor.snapshot import binding_text

_MARK = {"critical": "!!", "warning": "! ", "info": "i "}


def format_verdict(v: Verdict) -> str:
    """A verdict with its evidence, advice, exact flags and predictions."""
    impact = "" if v.impact is None else f"; best change: {v.impact * 100:+.0f}% fleet throughput (predicted)"
    lines = [
        f"{_MARK[v.severity]} {v.title} on {v.where()} (binds: {v.binds}{impact})",
        f"   {v.summary}",
        "   evidence:",
    ]
    width = max((len(k) for k, _ in v.evidence), default=0)
    lines += [f"     {k.ljust(width)}  {val}" for k, val in v.evidence]
    lines.append(f"   what to do: {v.advice}")
    if v.changes:
        lines.append("   try:")
        cw = max(len(c) for c in v.changes)
        caveats = v.caveats or ("",) * len(v.changes)
        for change, caveat in zip(v.changes, caveats, strict=False):
            pred = v.prediction(change)
            lines.append(f"     {change.ljust(cw)}  {pred.text() if pred else '(no prediction)'}".rstrip())
            if caveat:
                lines.append(f"     {' ' * cw}  note: {caveat}")
    return "\n".join(lines)


def format_verdicts(verdicts: Sequence[Verdict], servers: int) -> str:
    """The headline (the verdict of highest predicted impact), then every verdict, ranked."""
    if not verdicts:
        return f"no problem found on {servers} server(s): nothing binds harder than the GPUs themselves"
    top = headline(verdicts)
    binds = binding_text(rank(verdicts))  # the one rule every view names the binding resource by
    head = f"binding resource: {binds or 'none (no verdict names a resource)'}"
    if top is not None and top.changes:
        head += f"; best change: {top.changes[0]}, {(top.impact or 0) * 100:+.0f}% fleet throughput predicted"
    elif top is None:
        head += (
            "; no change has a predicted gain "
            "(the planner's predictions need the model and GPU: --model / --gpu, or a twin that says)"
        )
    return "\n\n".join([head, *(format_verdict(v) for v in verdicts)])
