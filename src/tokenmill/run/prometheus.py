"""``--metrics-port``: the client's own Prometheus metrics (``tokenmill_*``) and the run's live page.

Nothing is counted twice: at scrape time the collector serves every row of the metric table
(:mod:`tokenmill.run.metrics`), whose readers take the dispatcher's counters, the request histograms of
:class:`~tokenmill.monitor.client.ClientMetrics`, the monitor's server views and the doctor's verdicts. ``/``
is the live page (:mod:`tokenmill.monitor.page`) and ``/state.json`` what it polls. It is served by a small
aiohttp app on the run's event loop (127.0.0.1 unless configured otherwise), so no thread ever reads
half-updated counters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tokenmill.errors import ConfigError
from tokenmill.monitor.page import Timeline, page_html, page_state
from tokenmill.run.metrics import Metric as MetricRow
from tokenmill.run.metrics import Watched, rows
from tokenmill.run.viewer import LiveSamples

log = logging.getLogger(__name__)

_FAMILIES: dict[str, type[CounterMetricFamily | GaugeMetricFamily]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
}


class ClientCollector:
    """Builds every ``tokenmill_*`` family of the table (:data:`~tokenmill.run.metrics.METRICS`) at scrape time."""

    def __init__(self, monitor: Watched) -> None:
        self.m = monitor

    def collect(self) -> Iterator[Metric]:
        for row in rows():
            yield self.family(row)

    def family(self, row: MetricRow) -> Metric:
        """One row's family with the values its reader gives now."""
        labels = list(row.labels)
        if row.kind == "histogram":
            hist = HistogramMetricFamily(row.name, row.help, labels=labels)
            for values, h in row.read(self.m):
                hist.add_metric(list(values), [(_le(b), float(c)) for b, c in h.cumulative()], h.total)
            return hist
        fam: CounterMetricFamily | GaugeMetricFamily = _FAMILIES[row.kind](row.name, row.help, labels=labels)
        for values, value in row.read(self.m):
            fam.add_metric(list(values), value)
        return fam


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class Exporter:
    """Serves ``/metrics`` on ``host:port`` (port 0: any free port) until :meth:`stop`, and the live page: ``/``
    and the ``/state.json`` it polls (:mod:`tokenmill.monitor.page`)."""

    def __init__(self, monitor: Watched, host: str, port: int) -> None:
        self.m = monitor
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClientCollector(monitor))
        self.host = host
        self.port = port
        self.timeline = Timeline()  # fed by the run's ticks (RunMonitor.tick)
        self.samples = LiveSamples(monitor.info.out, monitor.info.partition)
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=page_html(), content_type="text/html")

    async def _state(self, request: web.Request) -> web.Response:
        info = self.m.info
        part = "" if info.partition is None else f" (partition {info.partition})"
        state = page_state(
            self.m.last, self.timeline, title=f"{info.model} -> {info.out}{part}", state="running",
            verdicts=self.m.state().verdicts, samples=await self.samples.get(), errors=dict(self.m.client.errors),
        )  # fmt: skip
        return web.Response(body=orjson.dumps(state), content_type="application/json")

    async def start(self) -> str:
        """Bind and serve; returns the URL of ``/metrics`` (the live page is at ``/``)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/", self._page)
        app.router.add_get("/state.json", self._state)
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
