"""The faults a chaos run injects, each an :class:`Event` with a beginning, a condition to end, and an end.

Events run on *tracks*: the events of one track one after the other (two windows of server faults would
overwrite each other's spec), the tracks side by side, so a store outage can overlap a server crash and a
window of connection resets. :class:`Tally` counts what was injected, by kind, for the summary.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.client import Client
from chaos.disk import SmallDisk
from chaos.fleet import RATE_FIELD, Fleet
from chaos.observe import OPEN, record_files
from chaos.proxy import NET_FAULTS, FaultProxy, NetFault
from chaos.store import MotoStore

# A trickled answer lasting at least the request timeout minus this was given up by the client itself (not
# cut short by a kill).
TRICKLE_SLACK_S = 1.0
# None may keep its client longer than this many request timeouts: a client that waited for the body would be held
# for the whole trickle (TRICKLE_BYTE_S per byte, minutes for an answer), while one that gives up by its own
# deadline is seen a little late by the proxy's loop on a machine busy with other work (6.1 s for a 4 s timeout).
TRICKLE_LATE_FACTOR = 2.0

# kind -> (what it is, where it is injected); the order of the summary table
KINDS: dict[str, tuple[str, str]] = {
    "client-sigkill": ("client SIGKILLed at a random moment", "harness"),
    "client-sigterm": ("client stopped with SIGTERM (graceful stop)", "harness"),
    "torn-write": ("machine crash: a file's un-synced tail torn", "harness, after a kill"),
    "server-sigkill": ("one server SIGKILLed, restarted by the fleet", "fleet"),
    "server-sigterm": ("one server stopped (SIGTERM), restarted by the fleet", "fleet"),
    "fleet-sigkill": ("every server SIGKILLed at once", "fleet"),
    "server-sigstop": ("one server frozen (SIGSTOP): killed and restarted by the fleet's watchdog", "fleet"),
    "error": ("HTTP 500 from the server", "sim /sim/faults"),
    "rate_limit": ("HTTP 429 with Retry-After", "sim /sim/faults"),
    "drop": ("connection closed without a response", "sim /sim/faults"),
    "malformed": ("200 with its JSON body cut in half", "sim /sim/faults"),
    "stall": ("request stalled past the read timeout", "sim /sim/faults"),
    "reset": ("connection reset (TCP RST)", "proxy"),
    "truncate": ("body shorter than its Content-Length", "proxy"),
    "garbage": ("200 with an HTML page / JSON of the wrong shape", "proxy"),
    "gateway": ("502/503/504 from a gateway", "proxy"),
    "trickle": ("200 whose body trickles in a byte at a time", "proxy"),
    "store-outage": ("object store down (connections refused)", "moto stopped"),
    "disk-full": ("output disk full mid-shard", "tmpfs ballast"),
    "machine-loss": ("the client and its whole output directory gone (a fresh start takes over)", "harness"),
}


@dataclass(slots=True)
class Tally:
    """What was injected, by kind, and what each injection showed."""

    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    details: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why it was not injected
    problems: list[str] = field(default_factory=list)  # a fault that was not survived as it should be

    def add(self, kind: str, n: float = 1, detail: str | None = None) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n
        if detail:
            self.details.setdefault(kind, []).append(detail)


@dataclass(slots=True)
class Ctx:
    """What the events act on."""

    fleet: Fleet
    proxy: FaultProxy
    store: MotoStore
    disk: SmallDisk
    client: Client
    out: Path
    tally: Tally
    stall_s: float
    holds: set[str] = field(default_factory=set)  # events that want the client left alone (no kill now)

    @property
    def hold_kills(self) -> bool:
        return bool(self.holds)


class Event(ABC):
    """One fault: :meth:`begin`, then :meth:`poll` until it returns True, then :meth:`end`."""

    name = "event"
    began = 0.0

    def begin(self, ctx: Ctx, now: float) -> None:
        self.began = now
        self._begin(ctx)

    @abstractmethod
    def _begin(self, ctx: Ctx) -> None: ...

    @abstractmethod
    def poll(self, ctx: Ctx, now: float) -> bool: ...

    def end(self, ctx: Ctx, now: float) -> None:  # noqa: B027 (most events have something to undo)
        """Undo the fault (default: nothing to undo)."""


class Window(Event):
    """Inject HTTP faults (``kinds``: kind -> rate; one kind, or all of a layer at once) for at least ``min_s``,
    until each kind was injected ``min_hits`` times (at most ``max_s``)."""

    def __init__(self, kinds: dict[str, float], min_s: float, max_s: float, min_hits: int, seed: int) -> None:
        self.kinds = kinds
        self.min_s, self.max_s, self.min_hits, self.seed = min_s, max_s, min_hits, seed
        self.name = "http:" + "+".join(sorted(kinds))
        self._base: dict[str, int] = {}

    def _counts(self, ctx: Ctx) -> dict[str, int]:
        return {**ctx.fleet.counts(), **ctx.proxy.counts}

    def _begin(self, ctx: Ctx) -> None:
        self._base = self._counts(ctx)
        sim = {RATE_FIELD[k]: r for k, r in self.kinds.items() if k in RATE_FIELD}
        net: dict[NetFault, float] = {k: r for k, r in self.kinds.items() if k in NET_FAULTS}
        if sim:
            ctx.fleet.set_faults({**sim, "stall_s": ctx.stall_s, "seed": self.seed})
        if net:
            ctx.proxy.set_rates(net)

    def hits(self, ctx: Ctx) -> int:
        now = self._counts(ctx)
        return min(now.get(k, 0) - self._base.get(k, 0) for k in self.kinds)

    def poll(self, ctx: Ctx, now: float) -> bool:
        took = now - self.began
        return took >= self.max_s or (took >= self.min_s and self.hits(ctx) >= self.min_hits)

    def end(self, ctx: Ctx, now: float) -> None:
        if any(k in RATE_FIELD for k in self.kinds):
            ctx.fleet.set_faults({})
        if any(k in ctx.proxy.counts for k in self.kinds):
            ctx.proxy.set_rates({})
        ctx.fleet.sync()
        if self.hits(ctx) < 1 and len(self.kinds) == 1:
            ctx.tally.problems.append(f"{self.name}: nothing was injected in {now - self.began:.0f} s (no traffic?)")


class TrickleWindow(Window):
    """Trickled answers, with the client left alone until it has given one up by its own request timeout
    (``full_s``): what shows that a slow answer cannot hold a request for longer than that."""

    def __init__(self, rate: float, min_s: float, max_s: float, full_s: float, seed: int) -> None:
        super().__init__({"trickle": rate}, min_s, max_s, 1, seed)
        self.full_s = full_s
        self._seen = 0

    def _begin(self, ctx: Ctx) -> None:
        super()._begin(ctx)
        self._seen = len(ctx.proxy.trickle_held_s)
        ctx.holds.add(self.name)

    def poll(self, ctx: Ctx, now: float) -> bool:
        held = ctx.proxy.trickle_held_s[self._seen :]
        return now - self.began >= self.max_s or (
            now - self.began >= self.min_s and max(held, default=0) >= self.full_s
        )

    def end(self, ctx: Ctx, now: float) -> None:
        ctx.holds.discard(self.name)
        super().end(ctx, now)


class ServerKill(Event):
    """Signal some servers; ends when the fleet has every one of them up again in a new process. A server frozen
    with SIGSTOP must be found hung and restarted by the fleet's watchdog; meanwhile the client is left alone, so
    its requests on the frozen server are the ones the watchdog's restart releases."""

    RESTART_TIMEOUT_S = 30.0

    def __init__(self, kind: str, indices: list[int], sig: signal.Signals) -> None:
        self.kind, self.indices, self.sig = kind, indices, sig
        self.name = f"{kind}:{','.join(map(str, indices))}"
        self._pids: dict[int, int] = {}

    def _begin(self, ctx: Ctx) -> None:
        for i in self.indices:
            pid = ctx.fleet.kill(i, self.sig)
            if pid is not None:
                self._pids[i] = pid
        if self.sig == signal.SIGSTOP:
            ctx.holds.add(self.name)

    def end(self, ctx: Ctx, now: float) -> None:
        ctx.holds.discard(self.name)

    def poll(self, ctx: Ctx, now: float) -> bool:
        if all(ctx.fleet.restarted(i, pid) for i, pid in self._pids.items()):
            if self._pids:
                servers = ", ".join(str(i) for i in self._pids)
                ctx.tally.add(self.kind, detail=f"server(s) {servers} back after {now - self.began:.1f} s")
            else:
                ctx.tally.problems.append(f"{self.name}: no server process to signal")
            return True
        if now - self.began > self.RESTART_TIMEOUT_S:
            ctx.tally.problems.append(f"{self.name}: not restarted within {self.RESTART_TIMEOUT_S:.0f} s")
            return True
        return False


class StoreOutage(Event):
    """The object store refuses connections for ``seconds``."""

    name = "store-outage"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _begin(self, ctx: Ctx) -> None:
        ctx.store.down()

    def poll(self, ctx: Ctx, now: float) -> bool:
        return now - self.began >= self.seconds

    def end(self, ctx: Ctx, now: float) -> None:
        ctx.store.up()
        ctx.tally.add("store-outage", detail=f"down {now - self.began:.1f} s")


class DiskFull(Event):
    """Fill the output disk while a shard is open; the client must stop by itself saying the disk is full,
    and a start on the still-full disk must say so too. Then the space is freed."""

    name = "disk-full"
    LEAVE_BYTES = 24 << 10
    MID_SHARD_WAIT_S = 10.0
    CLEAR_STOPS = 2

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.filled_at: float | None = None
        self._first_start = 0
        self.stops: list[str] = []

    def _begin(self, ctx: Ctx) -> None:
        if not ctx.disk.mounted:
            ctx.tally.skipped["disk-full"] = ctx.disk.reason or "no small disk"

    def _mid_shard(self, ctx: Ctx) -> bool:
        return any(OPEN.fullmatch(p.name) and p.stat().st_size > 0 for p in record_files(ctx.out))

    def poll(self, ctx: Ctx, now: float) -> bool:
        if not ctx.disk.mounted:
            return True
        if self.filled_at is None:
            if self._mid_shard(ctx) or now - self.began > self.MID_SHARD_WAIT_S:
                ctx.disk.fill(self.LEAVE_BYTES)
                self.filled_at = now
                ctx.holds.add(self.name)
                self._first_start = len(ctx.client.starts) - (1 if ctx.client.current is not None else 0)
            return False
        ended = [s for s in ctx.client.starts[self._first_start :] if s.ended and not s.killed]
        self.stops = [f"start {s.index}: {s.ended}, {s.message or 'said nothing'}" for s in ended]
        clear = [s for s in ended if s.message and "disk full" in s.message.lower()]
        if len(clear) >= self.CLEAR_STOPS:
            return True
        if now - self.filled_at > self.hold_s:
            ctx.tally.problems.append(
                f"disk-full: the client did not stop twice with a disk-full message within {self.hold_s:.0f} s "
                f"({'; '.join(self.stops) or 'it never stopped'})"
            )
            return True
        return False

    def end(self, ctx: Ctx, now: float) -> None:
        if self.filled_at is None:
            return
        ctx.disk.free()
        ctx.holds.discard(self.name)
        ctx.tally.add("disk-full", detail="; ".join(self.stops))


@dataclass(slots=True)
class Track:
    """Events run one after the other; each begins no earlier than its time (seconds into the phase)."""

    name: str
    events: list[tuple[float, Event]]
    active: Event | None = None
    done: list[Event] = field(default_factory=list)

    def step(self, ctx: Ctx, now: float) -> None:
        """Begin, poll and end events as their time comes."""
        if self.active is not None:
            if not self.active.poll(ctx, now):
                return
            self.active.end(ctx, now)
            self.done.append(self.active)
            self.active = None
        if self.events and now >= self.events[0][0]:
            _, event = self.events.pop(0)
            event.begin(ctx, now)
            self.active = event

    @property
    def finished(self) -> bool:
        return self.active is None and not self.events

    def abort(self, ctx: Ctx, now: float) -> None:
        """End the active event now (the phase ran out of time) and drop the rest."""
        if self.active is not None:
            self.active.end(ctx, now)
            self.active = None
        self.events.clear()


def active_names(tracks: list[Track]) -> list[str]:
    return [t.active.name for t in tracks if t.active is not None]


def describe(tracks: list[Track]) -> list[dict[str, Any]]:
    """The plan, for the JSON summary."""
    return [
        {"track": t.name, "events": [{"at_s": round(at, 1), "event": e.name} for at, e in t.events]} for t in tracks
    ]
