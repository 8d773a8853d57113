"""Progress of a run: windowed rates and ETA, a live ``rich`` display on a terminal, status lines elsewhere,
and the final Markdown summary table.

Everything here reads counters the dispatcher keeps; nothing here is on the request path.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tokenmill.dispatch import Dispatcher

log = logging.getLogger("tokenmill.progress")


class Window:
    """Rate of a monotonically increasing counter over the last ``span_s`` seconds."""

    def __init__(self, span_s: float = 30.0) -> None:
        self.span_s = span_s
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> None:
        self.samples.append((t, value))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.span_s:
            self.samples.popleft()

    def rate(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass(slots=True)
class ServerRow:
    url: str
    inflight: int
    limit: int
    completed: int
    errors: int
    tok_s: float
    usable: bool
    problem: str | None


@dataclass(slots=True)
class Snapshot:
    """What every display shows, computed once per tick."""

    elapsed_s: float
    done: int  # completed + failed, including earlier runs
    total: int | None
    completed: int
    failed: int
    skipped: int
    retries: int
    inflight: int
    comp_s: float
    tok_s: float
    eta_s: float | None
    servers: list[ServerRow]
    waiting: bool
    last_failure: str | None


class Tracker:
    """Samples the dispatcher's counters and derives rates, per server and in total."""

    def __init__(self, dispatcher: Dispatcher, clock: Callable[[], float] = time.monotonic) -> None:
        self.d = dispatcher
        self.clock = clock
        self.started = clock()
        self.total: int | None = None
        self.done_before = 0
        self.skipped = 0
        self._comp = Window()
        self._tok = Window()
        self._per_server = {s.url: Window() for s in dispatcher.servers}

    def snapshot(self) -> Snapshot:
        now = self.clock()
        st = self.d.stats
        self._comp.add(now, st.completed + st.failed)
        self._tok.add(now, st.completion_tokens)
        rows = []
        for s in self.d.servers:
            w = self._per_server[s.url]
            w.add(now, s.completion_tokens)
            rows.append(ServerRow(s.url, s.inflight, s.limit, s.completed, s.errors, w.rate(), s.usable, s.problem))
        done = self.done_before + st.completed + st.failed
        comp_s = self._comp.rate()
        eta = None
        if self.total is not None and comp_s > 0:
            eta = max(0.0, (self.total - done - self.skipped) / comp_s)
        return Snapshot(
            elapsed_s=now - self.started,
            done=done,
            total=self.total,
            completed=st.completed,
            failed=st.failed,
            skipped=self.skipped,
            retries=st.retries,
            inflight=self.d.inflight,
            comp_s=comp_s,
            tok_s=self._tok.rate(),
            eta_s=eta,
            servers=rows,
            waiting=st.waiting_since is not None,
            last_failure=st.recent_failures[-1] if st.recent_failures else None,
        )


def fmt_duration(seconds: float | None) -> str:
    """``1h02m``, ``3m07s``, ``12s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def status_line(snap: Snapshot) -> str:
    """One concise line for logs (nohup, CI)."""
    total = f"/{snap.total}" if snap.total is not None else ""
    usable = sum(1 for r in snap.servers if r.usable)
    line = (
        f"done {snap.done}{total} | {snap.comp_s:.1f} compl/s | {snap.tok_s:.0f} out tok/s | "
        f"in flight {snap.inflight} | failed {snap.failed} | retries {snap.retries} | "
        f"servers {usable}/{len(snap.servers)} | elapsed {fmt_duration(snap.elapsed_s)} | "
        f"ETA {fmt_duration(snap.eta_s)}"
    )
    if snap.waiting:
        line += " | WAITING: no server is usable"
    return line


def render(snap: Snapshot) -> Group:
    """The live display: a progress bar, the headline numbers and one row per server."""
    total = snap.total or max(snap.done, 1)
    head = Text.assemble(
        ("tokenmill ", "bold"),
        f"{snap.done}/{snap.total if snap.total is not None else '?'} done  ",
        (f"{snap.comp_s:.1f} compl/s  ", "cyan"),
        (f"{snap.tok_s:,.0f} out tok/s  ", "green"),
        f"in flight {snap.inflight}  ",
        (f"failed {snap.failed}  ", "red" if snap.failed else ""),
        f"retries {snap.retries}  elapsed {fmt_duration(snap.elapsed_s)}  ETA {fmt_duration(snap.eta_s)}",
    )
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for col in ("server", "in flight", "done", "out tok/s", "errors", "state"):
        table.add_column(col, justify="left" if col in ("server", "state") else "right")
    for r in snap.servers[:32]:
        state = "ok" if r.usable else f"[red]set aside[/red] {r.problem or ''}"[:80]
        table.add_row(r.url, f"{r.inflight}/{r.limit}", str(r.completed), f"{r.tok_s:,.0f}", str(r.errors), state)
    if len(snap.servers) > 32:
        table.add_row(f"... {len(snap.servers) - 32} more", "", "", "", "", "")
    parts: list[Text | ProgressBar | Table] = [head, ProgressBar(total=total, completed=min(snap.done, total)), table]
    if snap.waiting:
        parts.append(Text("no server is usable: waiting and probing; nothing is marked failed", style="bold red"))
    if snap.last_failure:
        parts.append(Text(f"last error: {snap.last_failure}"[:200], style="dim"))
    return Group(*parts)


class Display:
    """Live view on a terminal, else a status line every ``interval_s``; ``tick()`` is called about once a second."""

    def __init__(self, tracker: Tracker, interval_s: float, live: bool | None = None, console: Console | None = None):
        self.tracker = tracker
        self.interval_s = interval_s
        self.console = console or Console(stderr=True)
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last_line = -1e18

    def start(self) -> None:
        if self.live_mode:
            self._live = Live(console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def tick(self) -> Snapshot:
        snap = self.tracker.snapshot()
        if self._live is not None:
            self._live.update(render(snap))
        elif snap.elapsed_s - self._last_line >= self.interval_s:
            self._last_line = snap.elapsed_s
            print(status_line(snap), file=sys.stderr, flush=True)
        return snap

    def stop(self) -> Snapshot:
        snap = self.tracker.snapshot()
        if self._live is not None:
            self._live.update(render(snap))
            self._live.stop()
            self._live = None
        return snap
