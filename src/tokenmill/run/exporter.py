"""``--metrics-port``: the client's own Prometheus metrics (``tokenmill_*``) for a Grafana board.

Nothing is counted twice: the collector reads the dispatcher's counters, the request histograms of
:class:`~tokenmill.monitor.client.ClientMetrics`, the monitor's server views and the doctor's verdicts
when Prometheus scrapes. It is served by a small aiohttp app on the run's event loop (127.0.0.1 unless
configured otherwise), so no thread ever reads half-updated counters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tokenmill.errors import ConfigError

if TYPE_CHECKING:
    from tokenmill.doctor.engine import DoctorState
    from tokenmill.monitor.client import ClientMetrics
    from tokenmill.monitor.fleet import FleetMonitor
    from tokenmill.monitor.snapshot import Snapshot
    from tokenmill.run.dispatch import Dispatcher

log = logging.getLogger(__name__)


class Watched(Protocol):
    """What the exporter reads of a watched run (:class:`tokenmill.run.watch.RunMonitor` is one)."""

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def client(self) -> ClientMetrics: ...

    @property
    def last(self) -> Snapshot | None: ...

    @property
    def cpu_share(self) -> float | None: ...

    @property
    def fleet(self) -> FleetMonitor: ...

    @property
    def doctor(self) -> DoctorState: ...

    @property
    def max_tokens(self) -> int: ...


class ClientCollector:
    """Builds every ``tokenmill_*`` family from live state at scrape time."""

    def __init__(self, monitor: Watched) -> None:
        self.m = monitor

    def collect(self) -> Iterator[Metric]:
        yield from self._per_server()
        yield from self._counters()
        yield from self._gauges()
        verdicts = GaugeMetricFamily(
            "tokenmill_doctor_verdict", "1 while the doctor shows this verdict.", labels=["rule"]
        )
        for v in self.m.doctor.shown:
            verdicts.add_metric([v.rule], 1.0)
        yield verdicts
        lengths = self.m.client.output_len
        hist = HistogramMetricFamily("tokenmill_output_tokens_per_completion", "Output tokens per completion.")
        hist.add_metric([], [(_le(b), float(c)) for b, c in lengths.cumulative()], lengths.total)
        yield hist

    def _counters(self) -> Iterator[Metric]:
        """The run's counters: failures, retries, abandoned requests, errors by type and answers by finish reason."""
        st = self.m.dispatcher.stats
        for name, doc, count in (
            ("tokenmill_failures", "Prompts recorded as failed (failed.jsonl) in this run.", st.failed),
            ("tokenmill_retries", "Attempts that failed and were retried.", st.retries),
            (
                "tokenmill_abandoned_requests",
                "Requests given up on a read timeout while their server was overloaded (retried).",
                st.abandoned,
            ),
            (
                "tokenmill_abandoned_output_tokens",
                "Estimated output tokens of those requests (time spent x the per-request rate, at most max_tokens).",
                st.abandoned_tokens,
            ),
        ):
            fam = CounterMetricFamily(name, doc)
            fam.add_metric([], count)
            yield fam
        errors = CounterMetricFamily("tokenmill_request_errors", "Failed attempts by error type.", labels=["error"])
        for kind, count in sorted(self.m.client.errors.items()):
            errors.add_metric([kind], count)
        yield errors
        reasons = CounterMetricFamily("tokenmill_finish_reasons", "Answers by finish reason.", labels=["reason"])
        for reason, count in sorted(self.m.client.finish_reasons.items()):
            reasons.add_metric([reason], count)
        yield reasons

    def _gauges(self) -> Iterator[Metric]:
        """The run's gauges: the share cut at max_tokens, the limit, in flight, progress and ETA, the client's CPU
        and loop lag, generation held, and the upload backlog."""
        d = self.m.dispatcher
        st = d.stats
        client = self.m.client
        if client.answers:
            cut = GaugeMetricFamily(
                "tokenmill_truncated_ratio", "Share of this run's answers that hit max_tokens (finish reason length)."
            )
            cut.add_metric([], client.truncated / client.answers)
            yield cut
        limit = GaugeMetricFamily("tokenmill_max_tokens", "The job's sampling.max_tokens.")
        limit.add_metric([], float(self.m.max_tokens))
        yield limit
        snap = self.m.last
        gauges: list[tuple[str, str, float | None]] = [
            ("tokenmill_inflight_total", "Requests in flight over all servers.", float(d.inflight)),
            ("tokenmill_prompts_total", "Input rows (None until counted).", None if snap is None else snap.total),
            ("tokenmill_prompts_done", "Prompts completed or failed, all runs.", None if snap is None else snap.done),
            ("tokenmill_eta_seconds", "Estimated seconds to the end.", None if snap is None else snap.eta_s),
            ("tokenmill_client_cpu_ratio", "Client process CPU, share of one core.", self.m.cpu_share),
            ("tokenmill_event_loop_lag_seconds", "How late the monitor's timer fired.", self.m.fleet.loop_lag_s),
            ("tokenmill_generation_paused", "1 while generation is paused (upload backlog).", float(bool(st.held))),
        ]
        if snap is not None and snap.upload_pending is not None:
            gauges += [
                ("tokenmill_upload_pending_shards", "Sealed shards waiting for upload.", snap.upload_pending),
                ("tokenmill_upload_pending_bytes", "Bytes of those shards.", snap.upload_pending_bytes),
                ("tokenmill_upload_oldest_pending_seconds", "How long the oldest has waited.", snap.upload_oldest_s),
                ("tokenmill_upload_failing", "1 while the store's operations fail.", float(bool(snap.upload_error))),
            ]
        for name, doc, value in gauges:
            if value is not None:
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], float(value))
                yield g

    def _per_server(self) -> Iterator[Metric]:
        d = self.m.dispatcher
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "completions": CounterMetricFamily("tokenmill_completions", "Completions written.", labels=["server"]),
            "output": CounterMetricFamily(
                "tokenmill_output_tokens", "Output tokens of completions (client side).", labels=["server"]
            ),
            "prompt": CounterMetricFamily("tokenmill_prompt_tokens", "Prompt tokens sent.", labels=["server"]),
            "errors": CounterMetricFamily("tokenmill_server_errors", "Transient errors.", labels=["server"]),
            "timeouts": CounterMetricFamily(
                "tokenmill_server_overload_timeouts", "Read timeouts while the server was busy.", labels=["server"]
            ),
            "inflight": GaugeMetricFamily("tokenmill_inflight", "Requests in flight.", labels=["server"]),
            "limit": GaugeMetricFamily("tokenmill_inflight_limit", "In-flight limit.", labels=["server"]),
            "usable": GaugeMetricFamily("tokenmill_server_usable", "1 unless set aside.", labels=["server"]),
        }
        for s in d.servers:
            lab = [s.url]
            fams["completions"].add_metric(lab, s.completed)
            fams["output"].add_metric(lab, s.completion_tokens)
            fams["prompt"].add_metric(lab, s.prompt_tokens)
            fams["errors"].add_metric(lab, s.errors)
            fams["timeouts"].add_metric(lab, s.timeouts)
            fams["inflight"].add_metric(lab, s.inflight)
            fams["limit"].add_metric(lab, s.limit)
            fams["usable"].add_metric(lab, 1.0 if s.usable else 0.0)
        yield from fams.values()
        latency = HistogramMetricFamily(
            "tokenmill_request_latency_seconds", "Latency of finished attempts.", labels=["server"]
        )
        for url, h in sorted(self.m.client.latency.items()):
            latency.add_metric([url], [(_le(b), float(c)) for b, c in h.cumulative()], h.total)
        yield latency
        scraped: dict[str, GaugeMetricFamily] = {}
        for key, doc in (
            ("up", "1 when the server's /metrics answers."),
            ("running", "Running requests (window mean)."),
            ("queued", "Queued requests (window mean)."),
            ("max_running", "The server's max running requests."),
            ("kv_usage", "KV pool usage, 0-1 (window mean)."),
            ("state_usage", "Recurrent-state pool usage, 0-1 (window mean)."),
            ("decode_tokens_per_second", "The server's decode rate from its counters, over the window."),
        ):
            scraped[key] = GaugeMetricFamily(f"tokenmill_server_{key}", doc, labels=["server"])
        for v in self.m.fleet.views:
            if not v.scrapes:
                continue
            values = {
                "up": 1.0 if v.healthy else 0.0,
                "running": v.running,
                "queued": v.queued,
                "max_running": v.max_running,
                "kv_usage": v.kv_usage,
                "state_usage": v.state_usage,
                "decode_tokens_per_second": v.decode_tok_s,
            }
            for key, value in values.items():
                if value is not None:
                    scraped[key].add_metric([v.url], float(value))
        yield from scraped.values()


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class Exporter:
    """Serves ``/metrics`` on ``host:port`` (port 0: any free port) until :meth:`stop`."""

    def __init__(self, monitor: Watched, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClientCollector(monitor))
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> str:
        """Bind and serve; returns the URL of ``/metrics``."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port} ({exc.strerror or exc}); "
                "choose another monitor.metrics_port (--metrics-port), or 0 for any free port"
            ) from exc
        self._runner = runner
        addr = runner.addresses[0]
        self.port = int(addr[1])
        return f"http://{self.host}:{self.port}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
