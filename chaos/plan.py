"""The seeded plan of a chaos run: which faults, on which track, at what time into the killing phase."""

from __future__ import annotations

import random
import signal

from chaos.config import ChaosConfig
from chaos.faults import TRICKLE_SLACK_S, DiskFull, Event, ServerKill, StoreOutage, Track, TrickleWindow, Window
from chaos.fleet import SIM_FAULTS
from chaos.proxy import NET_FAULTS

MEAN_CYCLE_S = 2.6  # a client start, until its kill, on average (see KillPlan)
STORM_RATE = 0.04  # each kind's rate when every kind is injected at once


def phase_length(cfg: ChaosConfig) -> float:
    """About how long the killing phase takes: the kills, or the quick run's fault windows."""
    return max(cfg.kills * MEAN_CYCLE_S, 25.0)


def _spread(rng: random.Random, events: list[Event], start: float, span: float) -> list[tuple[float, Event]]:
    """``events`` at evenly spaced, jittered times over ``[start, start + span]``."""
    if not events:
        return []
    slot = span / len(events)
    return [(start + i * slot + rng.uniform(0, slot * 0.3), e) for i, e in enumerate(events)]


def _windows(cfg: ChaosConfig, rng: random.Random, kinds: tuple[str, ...]) -> list[Event]:
    order = list(kinds)
    rng.shuffle(order)
    events: list[Event] = []
    for kind in order:
        rate, seed = rng.uniform(*cfg.fault_rate), rng.randrange(1 << 30)
        if kind == "trickle":
            timeout = cfg.connect_timeout_s + cfg.read_timeout_s
            full_s = timeout - TRICKLE_SLACK_S
            events.append(TrickleWindow(rate, cfg.window_s, cfg.window_max_s + timeout, full_s, seed))
        else:
            events.append(Window({kind: rate}, cfg.window_s, cfg.window_max_s, cfg.min_hits, seed))
    if not cfg.quick:  # then everything at once, at low rates
        storm = dict.fromkeys(kinds, STORM_RATE)
        events.append(Window(storm, cfg.window_s, cfg.window_max_s, 1, rng.randrange(1 << 30)))
    return events


def _server_events(cfg: ChaosConfig, rng: random.Random) -> list[Event]:
    events: list[Event] = []
    events += [
        ServerKill("server-sigkill", [rng.randrange(cfg.servers)], signal.SIGKILL) for _ in range(cfg.server_kills)
    ]
    events += [
        ServerKill("server-sigterm", [rng.randrange(cfg.servers)], signal.SIGTERM) for _ in range(cfg.server_terms)
    ]
    events += [ServerKill("fleet-sigkill", list(range(cfg.servers)), signal.SIGKILL) for _ in range(cfg.fleet_kills)]
    events += [
        ServerKill("server-sigstop", [rng.randrange(cfg.servers)], signal.SIGSTOP) for _ in range(cfg.server_stops)
    ]
    rng.shuffle(events)
    return events


def build(cfg: ChaosConfig, rng: random.Random) -> list[Track]:
    """Every track of the run, with its events' times (seconds into the killing phase)."""
    length = phase_length(cfg)
    store: list[tuple[float, Event]]
    disk: list[tuple[float, Event]]
    if cfg.quick:  # one after the other, as soon as possible
        http = [(2.0, e) for e in _windows(cfg, rng, SIM_FAULTS)]
        net = [(2.0, e) for e in _windows(cfg, rng, NET_FAULTS)]
        servers = [(6.0, e) for e in _server_events(cfg, rng)]
        store = [(4.0, StoreOutage(cfg.store_outage_s)) for _ in range(cfg.store_outages)]
        disk = [(10.0, DiskFull(cfg.disk_full_hold_s)) for _ in range(cfg.disk_fulls)]
    else:
        span = length * 0.8
        http = _spread(rng, _windows(cfg, rng, SIM_FAULTS), 3.0, span)
        net = _spread(rng, _windows(cfg, rng, NET_FAULTS), 3.0 + span / 12, span)
        servers = _spread(rng, _server_events(cfg, rng), 5.0, span)
        outages: list[Event] = [StoreOutage(cfg.store_outage_s) for _ in range(cfg.store_outages)]
        store = _spread(rng, outages, 0.1 * length, 0.6 * length)
        fulls: list[Event] = [DiskFull(cfg.disk_full_hold_s) for _ in range(cfg.disk_fulls)]
        disk = _spread(rng, fulls, 0.2 * length, 0.6 * length)
    return [
        Track("server faults", http),
        Track("network faults", net),
        Track("server crashes", servers),
        Track("object store", store),
        Track("disk", disk),
    ]
