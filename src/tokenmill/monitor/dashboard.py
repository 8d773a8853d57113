"""The live dashboard: a ``rich`` renderable built from one :class:`~tokenmill.monitor.snapshot.Snapshot` (no I/O).

Head: progress, client completions/s and ``client_tok_s`` next to the servers' ``decode_tok_s``, ETA, failures,
the share of answers cut at max_tokens, and a sparkline of throughput. Table: a row per server (its
``decode_tok_s``, else its ``client_tok_s`` while it is not scraped; running / max running, queue, KV and state
usage, the client's in-flight / limit, errors, health) and a fleet total. Foot: requests abandoned on timeouts
and their wasted tokens, the upload backlog (and a pause for it), the doctor's verdict, what --autotune is
doing, and the last error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tokenmill.fmt import UNKNOWN, duration, num, pct
from tokenmill.monitor.lines import counts_text, expected_text, time_scale_text, truncation, upload_text, waste_text
from tokenmill.monitor.snapshot import binding_text
from tokenmill.monitor.stats import sparkline

if TYPE_CHECKING:
    from tokenmill.monitor.snapshot import ServerRow, Snapshot

MAX_ROWS = 32


def _usage_style(x: float | None) -> str:
    if x is None:
        return ""
    return "red" if x >= 0.9 else "yellow" if x >= 0.75 else ""


def _health(r: ServerRow) -> Text:
    if not r.usable:
        return Text(f"set aside: {r.problem or ''}"[:60], style="red")
    if r.healthy is False and r.missed_scrapes:  # its scrapes time out: a monitoring gap, the server works
        return Text(f"metrics late ({r.missed_scrapes} scrapes timed out)", style="yellow")
    if r.healthy is False:
        return Text("metrics down", style="yellow")
    if r.healthy is None:
        return Text("ok (not scraped)", style="dim")
    if r.limit_reason:  # concurrency: auto says why the in-flight target is what it is
        return Text.assemble(("ok", "green"), (f"  target: {r.limit_reason}"[:60], "dim"))
    return Text("ok", style="green")


def _running(r: ServerRow) -> str:
    if r.running is None:
        return "-"
    return f"{r.running:,.0f}/{r.max_running if r.max_running else '?'}"


def _head(snap: Snapshot) -> Text:

    total = snap.total if snap.total is not None else UNKNOWN
    head = Text.assemble(
        ("tokenmill ", "bold"),
        f"{snap.done:,}/{total if isinstance(total, str) else f'{total:,}'} done  ",
        (f"{snap.comp_s:.1f} compl/s  ", "cyan"),
        (f"client {snap.client_tok_s:,.0f} tok/s  ", "green"),
    )
    if snap.decode_tok_s is not None:
        head.append(f"servers decode {snap.decode_tok_s:,.0f} tok/s  ", style="bold green")
    head.append(f"in flight {snap.inflight}/{snap.limit}  ")
    head.append(f"failed {snap.failed}  ", style="red" if snap.failed else "")
    head.append(f"retries {snap.retries}  ")
    counted = counts_text(snap)
    head.append(f"{counted}  " if counted else "")
    head.append(f"elapsed {duration(snap.elapsed_s)}  ETA {duration(snap.eta_s)}")
    scaled = time_scale_text(snap)
    if scaled:
        head.append(f"  [{scaled}]", style="magenta")
    cut = truncation(snap)
    if cut:
        head.append(f"  {cut}", style="bold yellow" if snap.truncated else "")
    return head


def _table(snap: Snapshot) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    cols = ("server", "out tok/s", "running", "queue", "KV", "state", "client", "errors", "health")
    for col in cols:
        table.add_column(col, justify="left" if col in ("server", "health") else "right", no_wrap=True)
    for r in snap.servers[:MAX_ROWS]:
        tok = r.decode_tok_s if r.decode_tok_s is not None else r.client_tok_s
        table.add_row(
            r.url,
            num(tok),
            _running(r),
            num(r.queued),
            Text(pct(r.kv_usage), style=_usage_style(r.kv_usage)),
            Text(pct(r.state_usage), style=_usage_style(r.state_usage)),
            f"{r.inflight}/{r.limit}",
            str(r.errors),
            _health(r),
        )
    if len(snap.servers) > MAX_ROWS:
        table.add_row(f"... {len(snap.servers) - MAX_ROWS} more", *[""] * (len(cols) - 1))
    rows = snap.servers
    running = [r.running for r in rows if r.running is not None]
    caps = [r.max_running for r in rows if r.max_running]
    queued = [r.queued for r in rows if r.queued is not None]
    fleet_tok = snap.decode_tok_s if snap.decode_tok_s is not None else snap.client_tok_s
    up = sum(1 for r in rows if r.usable and (r.healthy is not False or r.missed_scrapes))
    table.add_row(
        Text(f"fleet ({len(rows)} servers, {snap.gpus} GPUs)", style="bold"),
        Text(num(fleet_tok), style="bold"),
        f"{sum(running):,.0f}/{sum(caps) if caps else '?'}" if running else "-",
        num(sum(queued)) if queued else "-",
        "",
        "",
        f"{snap.inflight}/{snap.limit}",
        str(sum(r.errors for r in rows)),
        Text(f"{up}/{len(rows)} ok", style="bold"),
    )
    return table


def render(snap: Snapshot) -> Group:
    """The whole dashboard for one snapshot."""
    total = snap.total or max(snap.done, 1)
    bar = Padding(ProgressBar(total=total, completed=min(snap.done, total), width=80), 0)  # its own line
    parts: list[Text | Padding | Table] = [_head(snap), bar]
    if snap.history:
        top = max(snap.history)
        parts.append(Text.assemble(("throughput ", "dim"), (sparkline(snap.history), "green"), f"  max {top:,.0f}"))
    parts.append(_table(snap))
    expected = expected_text(snap)
    if expected:
        each = ", ".join(f"{r.url} {r.expected_share * 100:.0f}%" for r in snap.servers if r.expected_share is not None)
        parts.append(Text(f"hardware: {expected}; per server: {each}"[:300], style="cyan"))
    waste, upload = waste_text(snap), upload_text(snap)
    if waste:
        parts.append(Text(waste, style="yellow"))
    if upload:
        parts.append(Text(upload[:300], style="bold red" if snap.upload_error else "yellow"))
    if snap.held:
        parts.append(Text(f"generation paused: {snap.held}"[:300], style="bold red"))
    if snap.waiting:
        parts.append(Text("no server is usable: waiting and probing; nothing is marked failed", style="bold red"))
    binds = binding_text(snap.verdicts)
    if binds:
        parts.append(Text(f"binding resource: {binds}"[:300], style="bold"))
    if snap.verdicts:
        v = snap.verdicts[0]
        style = "bold red" if v.severity == "critical" else "bold yellow" if v.severity == "warning" else "cyan"
        parts.append(Text(f"doctor: {v.line()}"[:300], style=style))
        for extra in snap.verdicts[1:3]:
            parts.append(Text(f"        {extra.title} ({extra.where()}): {extra.summary}"[:200], style="dim"))
    if snap.autotune:
        parts.append(Text(snap.autotune[:300], style="bold magenta"))
    if snap.last_failure:
        parts.append(Text(f"last error: {snap.last_failure}"[:200], style="dim"))
    return Group(*parts)
