"""Progress of a run: the :class:`Tracker` turns the dispatcher's counters and the watch's frozen state into one
:class:`~tokenmill.monitor.snapshot.Snapshot` per tick (client counters, windowed rates, the ETA of
:mod:`tokenmill.run.eta` and, when the fleet is watched, each server's scraped numbers and the doctor's
verdicts); the :class:`Display` shows it as a live ``rich`` dashboard on a terminal and as status lines elsewhere.

Watching flows one way: the monitor hands a :class:`~tokenmill.run.watchstate.WatchState` (``RunMonitor.state``)
and the tracker reads nothing else of it. Nothing here is on the request path.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler

from tokenmill.config import MonitorSpec
from tokenmill.monitor.dashboard import render
from tokenmill.monitor.lines import status_line
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.monitor.stats import History, Window
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.eta import Eta, EtaRule, in_flight_s
from tokenmill.run.metrics import run_counters
from tokenmill.run.watchstate import UNWATCHED, WatchState
from tokenmill.run.work import DispatchStats
from tokenmill.storage.upload import UploadStatus

log = logging.getLogger(__name__)

__all__ = ["Display", "Tracker"]


_DEFAULTS = MonitorSpec()  # where the defaults below come from


class Tracker:
    """Samples the dispatcher's counters and derives rates and the ETA; the watch's numbers come in as a frozen
    :class:`~tokenmill.run.watchstate.WatchState` with each :meth:`snapshot`."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        clock: Callable[[], float] = time.monotonic,
        history_points: int = _DEFAULTS.history_points,
        history_every_s: float = _DEFAULTS.scrape_interval_s,
        rate_window_s: float = _DEFAULTS.rate_window_s,
    ) -> None:
        self.d = dispatcher
        self.clock = clock
        self.started = clock()
        self.total: int | None = None
        self.done_before = 0
        self.skipped = 0
        self.rows_read = 0  # input rows read so far, and those with several user turns (the feed counts them)
        self.multi_turn = 0
        self.upload: Callable[[], UploadStatus] | None = None
        self._rate_window_s = rate_window_s
        self._comp = Window(rate_window_s)
        self._tok = Window(rate_window_s)
        self._per_server = {s.url: Window(rate_window_s) for s in dispatcher.servers}
        self._history = History(history_points)
        self._history_every = history_every_s
        self._next_history = self.started
        self._eta_rule = EtaRule(self._comp.span_s, self.started)
        self._sent = (0, self.started)  # the dispatcher's requests started, and when that count last grew

    def snapshot(self, watch: WatchState = UNWATCHED) -> Snapshot:
        """The tick's snapshot: the dispatcher's counters now, and ``watch``, what the monitor handed over."""
        now = self.clock()
        st = self.d.stats
        self._comp.add(now, st.completed + st.failed)
        self._tok.add(now, st.completion_tokens)
        rows = self._rows(now, watch)
        done = self.done_before + st.completed + st.failed
        comp_s = self._comp.rate()
        rates = [r.decode_tok_s for r in rows if r.decode_tok_s is not None]
        decode_tok_s = sum(rates) if rates else None
        client_tok_s = self._tok.rate()
        if now >= self._next_history:
            self._next_history = now + self._history_every
            self._history.add(decode_tok_s if decode_tok_s is not None else client_tok_s)
        return Snapshot(
            elapsed_s=now - self.started,
            done=done,
            total=self.total,
            completed=st.completed,
            skipped=self.skipped,
            inflight=self.d.inflight,
            comp_s=comp_s,
            client_tok_s=client_tok_s,
            eta_s=self._eta(now, done, comp_s, watch).seconds,
            servers=rows,
            waiting=st.waiting_since is not None,
            last_failure=st.recent_failures[-1] if st.recent_failures else None,
            decode_tok_s=decode_tok_s,
            history=tuple(self._history.values),
            prompt_tokens=st.prompt_tokens,
            client_tokens=st.completion_tokens,
            limit=sum(s.limit for s in self.d.servers),
            rows_read=self.rows_read,
            multi_turn_rows=self.multi_turn,
            outlived=st.outlived,
            repeatedly_abandoned=st.repeatedly_abandoned,
            held=st.held,
            **_counters(st),
            **_watched(watch),
            **_uploads(self.upload() if self.upload is not None else None),  # the uploader's (set by the runner)
        )

    def _eta(self, now: float, done: int, comp_s: float, watch: WatchState) -> Eta:
        """The ETA by :class:`~tokenmill.run.eta.EtaRule`: measured, or planned at the fitted eta while the measured
        rate is not yet founded, and never less than the requests in flight need."""
        started = self.d.stats.started
        if started != self._sent[0]:
            self._sent = (started, now)
        if self.total is None:
            return Eta()
        remaining = max(0, self.total - done - self.skipped)
        usable = frozenset(s.url for s in self.d.servers if s.usable and not s.draining)
        answered = sum(s.completed for s in self.d.servers)
        latency = sum(s.latency_s for s in self.d.servers) / answered if answered else None
        flight = in_flight_s(remaining, self.d.inflight, comp_s, latency, now - self._sent[1])
        return self._eta_rule.estimate(now, remaining, comp_s, usable, watch.planned, watch.mean_output, flight)

    def _rows(self, now: float, watch: WatchState) -> list[ServerRow]:
        """One row per server: the client's counters, and the monitor's scrape and the planner's expectation."""
        rows = []
        for s in self.d.servers:
            w = self._per_server.setdefault(s.url, Window(self._rate_window_s))
            w.add(now, s.completion_tokens)
            row = ServerRow(
                s.url,
                s.inflight,
                s.limit,
                s.completed,
                s.errors,
                client_tok_s=w.rate(),
                usable=s.usable,
                problem=s.problem,
                client_tokens=s.completion_tokens,
                limit_reason=s.limit_reason,
                timeouts=s.timeouts,
                abandoned_tokens=s.abandoned_tokens,
                read_timeout_s=s.read_timeout_s,
            )
            _add_watched(row, watch)
            rows.append(row)
        return rows


_OWN = frozenset(f.name for f in fields(Snapshot))  # the snapshot's own fields


def _counters(stats: DispatchStats) -> dict[str, Any]:
    """The table's run counters (:func:`~tokenmill.run.metrics.run_counters`): into the snapshot's field of the same
    name, or its ``counts``."""
    counted = run_counters(stats)
    own = {k: v for k, v in counted.items() if k in _OWN}
    return {**own, "counts": {k: float(v) for k, v in counted.items() if k not in _OWN}}


def _watched(watch: WatchState) -> dict[str, Any]:
    """The snapshot's fields that come from the watch as they are."""
    return {
        "verdicts": watch.verdicts,
        "binding": watch.binding,
        "cpu": watch.cpu,
        "loop_lag_s": watch.loop_lag_s,
        "autotune": watch.autotune,
        "answers": watch.answers,
        "truncated": watch.truncated,
        "max_tokens": watch.max_tokens,
        "conversation_turns": watch.conversation_turns,
    }


def _uploads(up: UploadStatus | None) -> dict[str, Any]:
    """The snapshot's upload fields (a run without ``output.remote`` has no uploader: ``upload_pending`` None)."""
    if up is None:
        return {}
    return {
        "upload_pending": up.pending,
        "upload_pending_bytes": up.pending_bytes,
        "upload_oldest_s": up.oldest_pending_s,
        "upload_error": (up.last_error or "failing") if up.failing else None,
    }


def _add_watched(row: ServerRow, watch: WatchState) -> None:
    """A server's scraped numbers and the planner's expectation of it, onto its row."""
    v = watch.view(row.url)
    if v is not None:
        row.healthy = v.healthy
        row.running, row.max_running, row.queued = v.running, v.max_running, v.queued
        row.kv_usage, row.state_usage = v.kv_usage, v.state_usage
        row.decode_tok_s, row.prompt_tok_s = v.decode_tok_s, v.prompt_tok_s
        row.gpus, row.decoded_tokens = v.gpus, v.decoded_tokens
        row.time_scale = v.info.time_scale if v.info is not None else None
        row.missed_scrapes = v.missed_scrapes
    exp = watch.expected.get(row.url)
    if exp is not None:
        row.expected_tok_s, row.ceiling_tok_s, row.gpu = exp.tok_s, exp.ceiling_tok_s, exp.gpu
    other = watch.compared.get(row.url)
    if other is not None:
        row.compare_tok_s, row.compare_gpu = other.tok_s, other.gpu


class Display:
    """Live dashboard on a terminal, else a status line every ``interval_s``; ``tick()`` runs about once a second.
    ``watch`` hands over the monitor's state for each tick (``RunMonitor.state``; none: an unwatched run)."""

    def __init__(
        self,
        tracker: Tracker,
        interval_s: float,
        live: bool | None = None,
        console: Console | None = None,
        watch: Callable[[], WatchState] | None = None,
    ) -> None:
        self.tracker = tracker
        self.watch = watch or (lambda: UNWATCHED)
        self.interval_s = interval_s
        self.console = console or Console(stderr=True)
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last_line = -1e18
        self._handlers: list[tuple[RichHandler, Console]] = []

    def start(self) -> None:
        if self.live_mode:
            self._live = Live(console=self.console, refresh_per_second=2, transient=False)
            self._live.start()
            # log records (the doctor's verdict changes, warnings) must go through the live console, or they
            # land inside the dashboard's frame instead of above it
            handlers = [h for h in logging.getLogger().handlers if isinstance(h, RichHandler)]
            self._handlers = [(h, h.console) for h in handlers]
            for h in handlers:
                h.console = self.console

    def _render(self, snap: Snapshot) -> None:
        assert self._live is not None
        self._live.update(render(snap))

    def tick(self) -> Snapshot:
        snap = self.tracker.snapshot(self.watch())
        if self._live is not None:
            self._render(snap)
        elif snap.elapsed_s - self._last_line >= self.interval_s:
            self._last_line = snap.elapsed_s
            print(status_line(snap), file=sys.stderr, flush=True)
        return snap

    def stop(self) -> Snapshot:
        """The last frame, or off a terminal the last status line (a run shorter than ``interval_s`` still gets
        one with its final counts)."""
        snap = self.tracker.snapshot(self.watch())
        if self._live is None and snap.elapsed_s > self._last_line:
            self._last_line = snap.elapsed_s
            print(status_line(snap), file=sys.stderr, flush=True)
        if self._live is not None:
            self._render(snap)
            self._live.stop()
            self._live = None
            for handler, console in self._handlers:
                handler.console = console
            self._handlers = []
        return snap
