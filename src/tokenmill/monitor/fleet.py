"""Polling every server of a fleet: one scrape per server per round, rates and gauge means over a window.

:class:`FleetMonitor` owns its own HTTP session (the dispatcher's connection pool is never shared), bounds
every scrape by a timeout, and keeps per server only what the window needs. A scrape that times out is a gap in
the monitoring, not a server going down: it counts no up/down change (``transitions``), only ``missed_scrapes``
and ``gap_s`` (what the doctor weighs against the client's completions). Its :meth:`~FleetMonitor.run`
loop is meant to be its own asyncio task: nothing on the request path ever waits for it. The latest
:class:`ServerView` of each server is a plain immutable value that displays, the doctor, the exporter and
the event log read at any time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp

from tokenmill.config import MonitorSpec
from tokenmill.monitor.info import ServerInfo, fetch_server_info
from tokenmill.monitor.scrape import Engine, ServerSnapshot, scrape
from tokenmill.monitor.stats import GaugeWindow, Window

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerView:
    """One server as last seen: the latest snapshot, gauge means and counter rates over the window."""

    url: str
    snapshot: ServerSnapshot | None  # None before the first scrape
    info: ServerInfo | None
    healthy: bool
    error: str | None
    running: float | None = None  # window means of the gauges
    running_peak: float | None = None  # the most seen running at once in the window
    queued: float | None = None
    queued_min: float | None = None  # 0 when the queue emptied at least once in the window
    kv_usage: float | None = None  # the KV pool (full attention on hybrids)
    state_usage: float | None = None  # the recurrent-state pool (hybrids)
    max_running: int | None = None
    decode_tok_s: float | None = None  # its decode rate: the live decode counter, else finished generation tokens
    prompt_tok_s: float | None = None  # live prefill rate, else finished prompt tokens
    prefix_hit_rate: float | None = None  # share of prompt tokens served from the prefix cache, over the window
    requests_s: float | None = None
    preemptions_per_min: float | None = None
    transitions: int = 0  # up/down changes within the flap window
    down_for_s: float | None = None  # how long it has been unreachable (None while it answers)
    decoded_tokens: float = 0.0  # tokens the server decoded while watched (restarts accounted for)
    scrapes: int = 0
    missed_scrapes: int = 0  # scrapes in a row that timed out (0: the last one answered, or was refused)
    gap_s: float | None = None  # since the first of them

    @property
    def engine(self) -> Engine:
        return self.snapshot.engine if self.snapshot is not None else "unknown"

    @property
    def avg_context(self) -> float | None:
        """Tokens held per running request (SGLang's decode_sum_seq_lens / running)."""
        s = self.snapshot
        if s is None or s.sum_seq_lens is None or not s.running:
            return None
        return s.sum_seq_lens / s.running

    @property
    def state_slots_per_request(self) -> float | None:
        """State slots held per running request (1 without radix cache, up to 3 with extra_buffer)."""
        s = self.snapshot
        if s is None or s.state_slots_used is None or not s.running:
            return None
        return s.state_slots_used / s.running

    @property
    def gpus(self) -> int:
        return self.info.gpus if self.info is not None else 1


class _Track:
    """Mutable per-server state behind a :class:`ServerView`."""

    def __init__(self, url: str, window_s: float) -> None:
        self.url = url
        self.view = ServerView(url=url, snapshot=None, info=None, healthy=False, error="not scraped yet")
        self.info: ServerInfo | None = None
        self.want_info = True
        self.running = GaugeWindow(window_s)
        self.queued = GaugeWindow(window_s)
        self.kv = GaugeWindow(window_s)
        self.state = GaugeWindow(window_s)
        self.out = Window(window_s)
        self.prompt = Window(window_s)
        self.prefill_compute = Window(window_s)
        self.prefill_cached = Window(window_s)
        self.requests = Window(window_s)
        self.preempt = Window(window_s)
        self.flips: deque[float] = deque()
        self.healthy: bool | None = None
        self.down_since: float | None = None
        self.last_out: float | None = None
        self.decoded_tokens = 0.0
        self.scrapes = 0
        self.missed = 0  # scrapes in a row that timed out
        self.gap_since: float | None = None

    def take(self, now: float, snap: ServerSnapshot) -> None:
        """A healthy scrape's gauges and counters into the windows (a counter that went back: a restart)."""
        self.running.add(now, snap.running)
        self.queued.add(now, snap.queued)
        self.kv.add(now, snap.kv_pool_usage)
        self.state.add(now, snap.state_usage if _hybrid(self.info, snap) is not False else None)
        out = _output_counter(snap)
        if out is not None:
            self.out.add(now, out)
            if self.last_out is not None:
                self.decoded_tokens += out - self.last_out if out >= self.last_out else out
                if out < self.last_out:
                    self.want_info = True  # restarted between two scrapes: perhaps with other flags
            self.last_out = out
        for window, value in (
            (self.prompt, _prompt_counter(snap)),
            (self.prefill_compute, snap.prefill_tokens_total),
            (self.prefill_cached, snap.prefill_cache_tokens_total),
            (self.requests, snap.requests_total),
            (self.preempt, snap.preemptions_total),
        ):
            if value is not None:
                window.add(now, value)


def _hybrid(info: ServerInfo | None, snap: ServerSnapshot) -> bool | None:
    """Whether the server has a recurrent-state pool: /server_info says, else the slot gauges; None: unknown."""
    if info is not None and info.hybrid is not None:
        return info.hybrid
    return snap.hybrid


def _hit_rate(cached_s: float | None, computed_s: float | None) -> float | None:
    """Cached prompt tokens over all prompt tokens in the window; None without prefill in it."""
    if cached_s is None or computed_s is None or cached_s + computed_s <= 0:
        return None
    return cached_s / (cached_s + computed_s)


def _output_counter(s: ServerSnapshot) -> float | None:
    return s.decode_tokens_total if s.decode_tokens_total is not None else s.generation_tokens_total


def _prompt_counter(s: ServerSnapshot) -> float | None:
    return s.prefill_tokens_total if s.prefill_tokens_total is not None else s.prompt_tokens_total


_DEFAULTS = MonitorSpec()  # where the defaults below come from


class FleetMonitor:
    """Scrapes ``urls`` every ``interval_s``; :attr:`views` holds the latest view of each server."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        interval_s: float = _DEFAULTS.scrape_interval_s,
        timeout_s: float = _DEFAULTS.scrape_timeout_s,
        window_s: float = _DEFAULTS.rate_window_s,
        flap_window_s: float = _DEFAULTS.doctor.flap_window_s,
        headers: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.flap_window_s = flap_window_s
        self.clock = clock
        self._headers = dict(headers or {})
        self._window_s = window_s
        self._tracks = [_Track(u, window_s) for u in urls]
        self.rounds = 0
        self.polled = asyncio.Event()  # set once every server has been looked at (the first round is in)
        self.loop_lag_s: float | None = None  # how late the last round started (event-loop congestion)

    @property
    def views(self) -> list[ServerView]:
        return [t.view for t in self._tracks]

    def sync(self, urls: Sequence[str]) -> None:
        """Follow a changing fleet: watch servers added since, forget servers removed."""
        known = {t.url: t for t in self._tracks}
        if list(known) != list(urls):
            self._tracks = [known.get(u) or _Track(u, self._window_s) for u in urls]

    def refresh_info(self, url: str) -> None:
        """Read ``url``'s ``/server_info`` again at its next scrape (it was re-flagged)."""
        for track in self._tracks:
            if track.url == url:
                track.want_info = True

    def ingest(self, url: str, snap: ServerSnapshot, info: ServerInfo | None = None) -> ServerView:
        """Take a snapshot made elsewhere (a recording, a replay) as if this monitor had scraped it."""
        track = next(t for t in self._tracks if t.url == url)
        if info is not None:
            track.info, track.want_info = info, False
        if snap.max_running is None and track.info is not None:
            snap = dataclasses.replace(snap, max_running=track.info.max_running)
        self._update(track, snap)
        return track.view

    def session(self) -> aiohttp.ClientSession:
        """A session of its own: small pool, every request bounded by the scrape timeout."""
        connector = aiohttp.TCPConnector(limit=max(4, 2 * len(self._tracks)), limit_per_host=2)
        return aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout_s), headers=self._headers
        )

    async def poll_once(self, session: aiohttp.ClientSession) -> list[ServerView]:
        """Scrape every server once (concurrently) and update the views."""
        await asyncio.gather(*(self._poll(session, t) for t in self._tracks))
        self.rounds += 1
        self.polled.set()
        return self.views

    async def sample(self, rounds: int, interval_s: float) -> list[ServerView]:
        """``rounds`` polls ``interval_s`` apart in a session of its own (the one-shot doctor)."""
        async with self.session() as session:
            for i in range(rounds):
                if i:
                    await asyncio.sleep(interval_s)
                await self.poll_once(session)
        return self.views

    async def run(self, on_round: Callable[[list[ServerView]], Awaitable[None]] | None = None) -> None:
        """Poll forever (cancel the task to stop); ``on_round`` sees each round's views."""
        loop = asyncio.get_running_loop()
        async with self.session() as session:
            due = loop.time()
            while True:
                self.loop_lag_s = max(0.0, loop.time() - due)
                await self.poll_once(session)
                if on_round is not None:
                    try:
                        await on_round(self.views)
                    except Exception:  # a display or doctor bug must not stop the scrapes
                        log.exception("monitor round handler failed")
                due = max(due + self.interval_s, loop.time())
                await asyncio.sleep(due - loop.time())

    async def _poll(self, session: aiohttp.ClientSession, track: _Track) -> None:
        if track.want_info:
            try:
                info = await asyncio.wait_for(fetch_server_info(session, track.url), self.timeout_s * 2)
            except TimeoutError:
                info = None
            if info is not None:
                track.info, track.want_info = info, False
        cap = track.info.max_running if track.info is not None else None
        try:
            snap = await asyncio.wait_for(
                scrape(session, track.url, self.clock, max_running=cap, server_info=False), self.timeout_s + 1
            )
        except TimeoutError:
            snap = ServerSnapshot(
                engine="unknown",
                taken_at=self.clock(),
                healthy=False,
                error=f"{track.url}/metrics timed out",
                timed_out=True,
            )
        if snap.engine == "vllm":
            track.want_info = False  # vLLM has neither /server_info nor /v1/loads
        self._update(track, snap)

    def _update(self, track: _Track, snap: ServerSnapshot) -> None:
        now = snap.taken_at
        track.scrapes += 1
        if snap.timed_out:  # no answer in time: a gap, not a change of state (its last state stands)
            track.missed += 1
            track.gap_since = now if track.gap_since is None else track.gap_since
        else:
            track.missed, track.gap_since = 0, None
        if not snap.timed_out and track.healthy is not None and track.healthy != snap.healthy:
            track.flips.append(now)
            if snap.healthy:
                track.want_info = True  # it may have been restarted with other flags
        while track.flips and now - track.flips[0] > self.flap_window_s:
            track.flips.popleft()
        if not snap.timed_out:
            track.healthy = snap.healthy
        if snap.healthy:
            track.down_since = None
            track.take(now, snap)
        elif track.down_since is None:
            track.down_since = now
        track.view = _view(track, snap, now)


def _view(track: _Track, snap: ServerSnapshot, now: float) -> ServerView:
    """The server as this scrape leaves it: the snapshot, the windows' means and rates, its up/down history."""
    preempt = track.preempt.rate_or_none()
    if preempt is None and snap.engine == "sglang":
        preempt = 0.0  # SGLang writes the counter only from the first retraction on
    return ServerView(
        url=track.url,
        # while it is down, the last good numbers stay for context (``healthy`` says it is down)
        snapshot=snap if snap.healthy or track.view.snapshot is None else track.view.snapshot,
        info=track.info,
        healthy=snap.healthy,
        error=snap.error,
        running=track.running.mean(),
        running_peak=track.running.max(),
        queued=track.queued.mean(),
        queued_min=track.queued.min(),
        kv_usage=track.kv.mean(),
        state_usage=track.state.mean(),
        max_running=snap.max_running or (track.info.max_running if track.info else None),
        # a server that does not answer produces nothing: its rates drop to 0 at once (the window's last
        # good rate would go on counting in the fleet's totals); a scrape that timed out says nothing
        decode_tok_s=track.out.rate_or_none() if snap.healthy else None if snap.timed_out else 0.0,
        prompt_tok_s=track.prompt.rate_or_none() if snap.healthy else 0.0,
        prefix_hit_rate=_hit_rate(track.prefill_cached.rate_or_none(), track.prefill_compute.rate_or_none()),
        requests_s=track.requests.rate_or_none() if snap.healthy else 0.0,
        preemptions_per_min=None if preempt is None else preempt * 60,
        transitions=len(track.flips),
        down_for_s=None if track.down_since is None else now - track.down_since,
        decoded_tokens=track.decoded_tokens,
        scrapes=track.scrapes,
        missed_scrapes=track.missed,
        gap_s=None if track.gap_since is None else now - track.gap_since,
    )
