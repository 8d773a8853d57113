"""Verdicts as plain text: the report of `tokenmill doctor`, and the log lines of a run."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.doctor.model import Verdict

_MARK = {"critical": "!!", "warning": "! ", "info": "i "}


def format_verdict(v: Verdict) -> str:
    """A verdict with its evidence, advice, exact flags and predictions."""
    lines = [f"{_MARK[v.severity]} {v.title} on {v.where()} (binds: {v.binds})", f"   {v.summary}", "   evidence:"]
    width = max((len(k) for k, _ in v.evidence), default=0)
    lines += [f"     {k.ljust(width)}  {val}" for k, val in v.evidence]
    lines.append(f"   what to do: {v.advice}")
    if v.changes:
        by_change = {p.change: p for p in v.predictions}
        lines.append("   try:")
        cw = max(len(c) for c in v.changes)
        caveats = v.caveats or ("",) * len(v.changes)
        for change, caveat in zip(v.changes, caveats, strict=False):
            pred = by_change.get(change)
            lines.append(f"     {change.ljust(cw)}  {pred.text() if pred else ''}".rstrip())
            if caveat:
                lines.append(f"     {' ' * cw}  note: {caveat}")
    return "\n".join(lines)


def format_verdicts(verdicts: Sequence[Verdict], servers: int) -> str:
    if not verdicts:
        return f"no problem found on {servers} server(s): nothing binds harder than the GPUs themselves"
    head = f"binding resource: {verdicts[0].binds} ({verdicts[0].title})"
    return "\n\n".join([head, *(format_verdict(v) for v in verdicts)])
