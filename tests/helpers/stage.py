"""Staged twin fleets for the doctor's tests: the twin's own scheduler and /metrics, run in virtual time.

A :class:`StagedServer` is the simulated server's physics (:class:`~tokenmill.sim.twin.TwinStepModel` driving the
:class:`~tokenmill.sim.scheduler.Scheduler`) under a closed-loop client that keeps ``inflight`` requests
outstanding, scraped every ``interval_s`` simulated seconds through the simulator's own exposition
(:class:`~tokenmill.sim.metrics.SimCollector`) and ``/server_info`` body, parsed by the monitor as a live scrape
would be. No sockets and no sleeping: a minute of a busy server costs milliseconds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from tokenmill.config import SimSpec
from tokenmill.doctor import ClientObs, ClientSide, Observation, ServerObs
from tokenmill.monitor.fleet import FleetMonitor, ServerView
from tokenmill.monitor.info import parse_server_info
from tokenmill.monitor.scrape import ServerSnapshot, parse_metrics
from tokenmill.sim.info import server_info
from tokenmill.sim.metrics import RequestMetrics, SimCollector, exposition, make_registry
from tokenmill.sim.scheduler import Scheduler, SimRequest, Timing
from tokenmill.sim.twin import TwinStepModel


@dataclass
class Load:
    """The client: requests of ``prompt`` tokens, outputs drawn around ``output`` (log-normal, capped by
    ``max_tokens``), ``inflight`` of them outstanding at once."""

    prompt: int
    output: int
    inflight: int
    max_tokens: int | None = None
    sigma: float = 0.3

    @property
    def limit(self) -> int:
        return self.max_tokens or self.output * 2


@dataclass
class StagedServer:
    """One twin under a closed-loop load, in virtual time (seconds)."""

    model: str
    gpu: str
    flags: str
    load: Load
    url: str = "http://10.0.0.1:30000"
    seed: int = 0
    up: bool = True
    now: float = 0.0
    requests: list[SimRequest] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cfg = SimSpec(model=self.model, gpu=self.gpu, engine_flags=self.flags, output_len_mean=self.load.output)
        self.twin = TwinStepModel.from_config(self.cfg)
        self.cfg = self.twin.resolve(self.cfg)
        self.scheduler = Scheduler(self.twin, time_scale=1.0, max_queued=None, log_interval=40)
        self.metrics = RequestMetrics()
        self.registry = make_registry(
            SimCollector(
                self.cfg.model, self.twin, self.cfg.context_length, self.scheduler.snapshot, self.metrics, dict
            )
        )
        self.rng = random.Random(self.seed)
        self.info = parse_server_info(server_info(self.cfg, self.twin, self.scheduler.snapshot(), "10.0.0.1", 30000))
        self._fill(0.0)

    def _length(self) -> int:
        mu = math.log(self.load.output) - self.load.sigma**2 / 2
        return max(1, min(self.load.limit, round(self.rng.lognormvariate(mu, self.load.sigma))))

    def _fill(self, t: float) -> None:
        while len(self.requests) < self.load.inflight:
            req = SimRequest(self.load.prompt, self._length(), t, max_new_tokens=self.load.limit)
            self.requests.append(req)
            self._settle(self.scheduler.submit(req, t))

    def _settle(self, done: list[SimRequest]) -> None:
        for r in done:
            timing = Timing(r.started - r.arrived, r.first_token - r.arrived, r.finished - r.arrived, r.retractions)
            self.metrics.observe_finished(r.prompt_tokens, r.output_tokens, timing)
            self.outputs.append(r.output_tokens)
            self.requests.remove(r)

    def run_until(self, t_end: float) -> None:
        """Advance to ``t_end``, replacing each finished request at once (a client at its in-flight limit)."""
        while self.now < t_end:
            nxt = self.scheduler.next_event_at()
            t = t_end if nxt is None else min(max(nxt, self.now), t_end)
            self._settle(self.scheduler.advance(t))
            self.now = t
            self._fill(t)
            if nxt is None or t >= t_end:
                break

    def scrape(self) -> ServerSnapshot:
        if not self.up:
            return ServerSnapshot("unknown", self.now, False, error=f"{self.url}/metrics: connection refused")
        return parse_metrics(exposition(self.registry).decode(), self.now)


class Stage:
    """Servers scraped every ``interval_s`` by one monitor, run on in steps (:meth:`run`)."""

    def __init__(self, servers: list[StagedServer], *, interval_s: float = 3.0, window_s: float = 60.0) -> None:
        self.servers = servers
        self.interval_s = interval_s
        self.monitor = FleetMonitor([s.url for s in servers], window_s=window_s, flap_window_s=600.0)
        self.views: dict[str, ServerView] = {}
        self.t = 0.0

    def run(self, seconds: float) -> Observation:
        """Run every server ``seconds`` more (virtual), scraping on the way; the observation at the end, with the
        client's side (each server's in-flight count at the client's limit, the mean lengths, max_tokens)."""
        end = self.t + seconds
        while self.t <= end:
            for s in self.servers:
                s.run_until(self.t)
                self.views[s.url] = self.monitor.ingest(s.url, s.scrape(), s.info)
            self.t += self.interval_s
        outputs = [n for s in self.servers for n in s.outputs]
        load = self.servers[0].load
        whole = sorted(n for n in outputs if n < load.limit)  # the answers not cut at max_tokens
        client = ClientObs(
            avg_prompt_tokens=float(load.prompt),
            avg_output_tokens=sum(outputs) / len(outputs) if outputs else None,
            max_tokens=load.limit,
            completed_p50=whole[len(whole) // 2] if whole else None,
            completed_p90=whole[int(len(whole) * 0.9)] if whole else None,
        )
        obs = [ServerObs(self.views[s.url], ClientSide(inflight=float(s.load.inflight), limit=s.load.inflight))
               for s in self.servers]  # fmt: skip
        return Observation(tuple(obs), client)


def stage(servers: list[StagedServer], *, seconds: float = 240.0, interval_s: float = 3.0) -> Observation:
    """``servers`` run for ``seconds`` (virtual) from the start, scraped every ``interval_s``."""
    return Stage(servers, interval_s=interval_s).run(seconds)


def fleet(n: int, model: str, gpu: str, flags: str, load: Load) -> list[StagedServer]:
    """``n`` identical servers (each with its own seed for output lengths)."""
    return [StagedServer(model, gpu, flags, load, url=f"http://10.0.0.{i + 1}:30000", seed=i) for i in range(n)]
