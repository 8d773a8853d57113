"""The fleet's watchdog: telling a hung server from a busy one.

A server whose process runs but that answers no health probe, or that generates nothing while it holds running
requests, is hung (a stuck scheduler, a wedged collective, a frozen process): its keeper kills it and starts it
again like a crashed one (see :mod:`tokenmill.fleet.keeper`), so the runs following the fleet set it aside
meanwhile and retry its requests elsewhere (a reset connection does not spend a prompt's attempts).

:class:`Watchdog` is the decision alone, over two seams (a health probe and a metrics reader) and a clock; the
keeper calls :meth:`Watchdog.check` from its thread, and one look is taken every ``watchdog.interval_s``:

- a health probe without an answer within ``probe_timeout_s`` is a miss, unless the server's token counter moved
  since the last look (a busy server, or a busy machine, answers its work before its probes: it is not hung);
  ``probe_failures`` misses in a row make the server hung (a slow answer now and then does not);
- the generated-token counter (SGLang's live decode counter, else ``generation_tokens_total``) is read with the
  running requests: when it has not moved for ``stall_s`` while requests were running at every look, the
  server is hung. A scrape that fails says nothing either way (the probe covers a server that does not answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.config import WatchdogSpec
from tokenmill.fleet import health


@dataclass(frozen=True, slots=True)
class Reading:
    """What a server's metrics say: requests running, and its generated-token counter."""

    running: float | None
    tokens: float | None


Probe = Callable[[str, float], bool]  # (url, timeout) -> answered (any HTTP status)
Reader = Callable[[str, float], Reading | None]  # (url, timeout) -> reading, or None when it could not be read


def answered(url: str, timeout: float) -> bool:
    """Whether ``url`` answers a GET within ``timeout`` (any HTTP status: a server that answers is not hung)."""
    return health.get(url, timeout) is not None


def read_metrics(url: str, timeout: float) -> Reading | None:
    """Running requests and the generated-token counter from ``url``'s ``/metrics``."""
    from tokenmill.monitor.scrape import parse_metrics

    answer = health.get(url + "/metrics", timeout)
    if answer is None or answer[0] != 200:
        return None
    try:
        snap = parse_metrics(answer[1].decode("utf-8", "replace"), time.monotonic())
    except Exception:  # not Prometheus text: no reading
        return None
    tokens = snap.decode_tokens_total if snap.decode_tokens_total is not None else snap.generation_tokens_total
    return Reading(snap.running, tokens)


class Watchdog:
    """Decides when one server is hung (see the module docstring)."""

    def __init__(
        self,
        spec: WatchdogSpec,
        url: str,
        health_path: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        probe: Probe = answered,
        read: Reader = read_metrics,
    ) -> None:
        self.spec = spec
        self.url = url
        self.health_url = url + health_path
        self.clock = clock
        self.probe = probe
        self.read = read
        self.misses = 0
        self._next = clock() + spec.interval_s
        self._tokens: float | None = None
        self._last_tokens: float | None = None  # the counter at the last reading (any look)
        self.busy_misses = 0  # probes missed while the counter moved (not counted against the server)
        self._busy_since: float | None = None  # running requests at every look since then, counter unchanged

    def check(self) -> str | None:
        """Take a look when one is due: why the server is hung, or None."""
        now = self.clock()
        if now < self._next:
            return None
        self._next = now + self.spec.interval_s
        answered = self.probe(self.health_url, self.spec.probe_timeout_s)
        reading = self.read(self.url, self.spec.probe_timeout_s) if not answered or self.spec.stall_s > 0 else None
        moved = self._moved(reading)
        if not answered and not moved:
            self.misses += 1
            if self.misses >= self.spec.probe_failures:
                return (
                    f"its health probe got no answer {self.misses} times in a row "
                    f"(each within {self.spec.probe_timeout_s:g} s) and its token counter did not move"
                )
            return None
        if not answered:
            self.busy_misses += 1  # no answer, but generating: busy, never killed for it
        self.misses = 0
        return self._stalled(now, reading) if self.spec.stall_s > 0 else None

    def _moved(self, reading: Reading | None) -> bool:
        """Whether the token counter moved since the last reading of it (a new reading becomes the last)."""
        if reading is None or reading.tokens is None:
            return False
        moved = self._last_tokens is not None and reading.tokens != self._last_tokens
        self._last_tokens = reading.tokens
        return moved

    def _stalled(self, now: float, reading: Reading | None) -> str | None:
        if reading is None or reading.tokens is None or reading.running is None:
            return None
        if reading.running <= 0 or reading.tokens != self._tokens:
            self._tokens = reading.tokens
            self._busy_since = now if reading.running > 0 else None
            return None
        if self._busy_since is None:
            self._busy_since = now
        if now - self._busy_since >= self.spec.stall_s:
            return (
                f"it generated nothing for {now - self._busy_since:.0f} s while holding {reading.running:g} running "
                "request(s)"
            )
        return None
