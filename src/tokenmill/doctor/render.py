"""The doctor as plain text: the report of `tokenmill doctor` (servers, hardware, verdicts), a run's log lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenmill.doctor.engine import headline, rank
from tokenmill.doctor.model import ServerObs, Verdict
from tokenmill.doctor.outputs import HEADER as OUTPUTS_HEADER
from tokenmill.doctor.outputs import WARNING as OUTPUT_WARNING
from tokenmill.doctor.outputs import changes_outputs
from tokenmill.doctor.outputs import why as why_outputs
from tokenmill.fmt import num, pct
from tokenmill.monitor.snapshot import binding_text

_MARK = {"critical": "!!", "warning": "! ", "info": "i "}


def format_verdict(v: Verdict) -> str:
    """A verdict with its evidence, advice, exact flags and predictions."""
    impact = "" if v.impact is None else f"; best change: {v.impact * 100:+.0f}% fleet throughput (predicted)"
    lines = [
        f"{_MARK[v.severity]} {v.title} on {v.where()} (binds: {v.binds or 'none'}{impact})",
        f"   {v.summary}",
        "   evidence:",
    ]
    width = max((len(k) for k, _ in v.evidence), default=0)
    lines += [f"     {k.ljust(width)}  {val}" for k, val in v.evidence]
    lines.append(f"   what to do: {v.advice}")
    caveats = v.caveats if len(v.caveats) == len(v.changes) else ("",) * len(v.changes)
    pairs = list(zip(v.changes, caveats, strict=True))
    same = [(c, n) for c, n in pairs if not changes_outputs(c)]
    other = [(c, n) for c, n in pairs if changes_outputs(c)]
    cw = max((len(c) for c in v.changes), default=0)
    if same:
        lines.append("   try (the model's outputs stay the same):")
        lines += _changes(v, same, cw)
    if other:
        lines.append(f"   {OUTPUTS_HEADER}:")
        lines += _changes(v, other, cw, outputs=True)
    return "\n".join(lines)


def _changes(v: Verdict, pairs: Sequence[tuple[str, str]], cw: int, outputs: bool = False) -> list[str]:
    lines = []
    for change, caveat in pairs:
        pred = v.prediction(change)
        lines.append(f"     {change.ljust(cw)}  {pred.text() if pred else '(no prediction)'}".rstrip())
        if outputs:
            lines.append(f"     {' ' * cw}  changes the outputs: {why_outputs(change)}")
        if caveat:
            lines.append(f"     {' ' * cw}  note: {caveat}")
    return lines


def format_verdicts(verdicts: Sequence[Verdict], servers: int) -> str:
    """The headline (the verdict of highest predicted impact), then every verdict, ranked."""
    if not verdicts:
        return f"no problem found on {servers} server(s): nothing binds harder than the GPUs themselves"
    top = headline(verdicts)
    binds = binding_text(rank(verdicts))  # the one rule every view names the binding resource by
    head = f"binding resource: {binds or 'none (no verdict names a resource)'}"
    best = top.best_change() if top is not None else None
    if top is not None and best is not None:
        head += f"; best change: {best}, {(top.impact or 0) * 100:+.0f}% fleet throughput predicted"
        head += f" ({OUTPUT_WARNING})" if changes_outputs(best) else ""
    elif top is None and any(v.changes for v in verdicts):
        head += (
            "; no change has a predicted gain "
            "(the planner's predictions need the model and GPU: --planner-model / --gpu, or a twin that says)"
        )
    return "\n\n".join([head, *(format_verdict(v) for v in verdicts)])


def servers_table(servers: Sequence[ServerObs]) -> str:
    """One line per server: running, queue, pools, rates and health, as one look saw them."""
    lines = ["server                          running    queue   KV     state  decode tok/s  prompt tok/s  health"]
    for s in servers:
        v = s.view
        run = f"{num(v.running)}/{v.max_running or '?'}"
        health = "up" if v.healthy else f"down: {v.error}"
        lines.append(
            f"{v.url:<31} {run:>9} {num(v.queued):>8} {pct(v.kv_usage):>6} {pct(v.state_usage):>6} "
            f"{num(v.decode_tok_s):>13} {num(v.prompt_tok_s):>13}  {health}"
        )
    return "\n".join(lines)


def hardware_text(rows: Sequence[dict[str, Any]]) -> str:
    """Each server's decode rate as a share of what the planner expects, of the roofline, of another GPU."""
    lines = []
    for r in rows:
        line = (
            f"{r['server']}: decodes {num(r['decode_tok_s'])} tok/s (GPU clock), {r['expected_share'] * 100:.0f}% of "
            f"the planner's {num(r['expected_tok_s'])} on {r['gpu']}, {r['ceiling_share'] * 100:.0f}% of the "
            f"roofline's {num(r['ceiling_tok_s'])}"
        )
        if "compare_gpu" in r:
            line += f", {r['compare_share'] * 100:.0f}% of the {num(r['compare_tok_s'])} planned on {r['compare_gpu']}"
        lines.append(line)
    return "\n".join(lines)


def rules_text() -> str:
    """The rule table, one line a rule."""
    from tokenmill.doctor.rules import RULES

    return "\n".join(f"{r.id:<24} binds {r.binds:<20} when {r.when}" for r in RULES)
