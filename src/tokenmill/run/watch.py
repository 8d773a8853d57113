"""Everything that watches a run, wired together: scrapes, client metrics, doctor, event log, exporter.

:class:`RunMonitor` is what ``run_job`` starts beside the dispatcher. Its scrape loop is its own task;
the dispatcher only calls :meth:`ClientMetrics.observe` (a few additions per finished request), and the
display tick hands it each :class:`~tokenmill.monitor.snapshot.Snapshot` for the event log. Doctor rounds run
in a worker thread so a planner prediction never holds up the event loop. With ``--autotune`` the tuner
(:mod:`tokenmill.autotune.loop`) sees every round's views and confirmed verdicts and writes ``autotune`` records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenmill.config import JobSpec, MonitorSpec
from tokenmill.doctor import ClientObs, ClientSide, DoctorState, Observation, PlannerPredictor, ServerObs, diagnose
from tokenmill.doctor.predict import Expected
from tokenmill.errors import ConfigError
from tokenmill.monitor.client import ClientMetrics
from tokenmill.monitor.events import EVENT_FORMAT, EventLog, events_file
from tokenmill.monitor.fleet import FleetMonitor, ServerView
from tokenmill.monitor.snapshot import binding_verdict
from tokenmill.monitor.stats import CpuMeter, GaugeWindow
from tokenmill.planner.run_files import sends_ignore_eos
from tokenmill.run.control import queue_for
from tokenmill.run.efficiency import EtaFit
from tokenmill.run.metrics import RunInfo
from tokenmill.run.prometheus import Exporter
from tokenmill.run.watchstate import WatchState, frozen_map

if TYPE_CHECKING:
    from tokenmill.autotune.loop import Autotuner
    from tokenmill.doctor.model import Verdict
    from tokenmill.monitor.snapshot import Snapshot
    from tokenmill.run.dispatch import Dispatcher

log = logging.getLogger(__name__)


def tick_record(
    snap: Snapshot, client: ClientMetrics, inflight_avg: dict[str, float | None] | None = None
) -> dict[str, Any]:
    """The ``tick`` record of the event log for one snapshot: :meth:`Snapshot.to_event`, plus what the client's
    metrics add (finish reasons, errors by type, the output-length histograms of all answers and of those that did
    not hit max_tokens, and ``inflight_avg``: each server's in-flight window mean)."""
    avg = inflight_avg or {}
    record = snap.to_event()
    record["client"].update(
        finish_reasons=dict(client.finish_reasons),
        errors=dict(client.errors),
        output_len=client.output_len.as_dict(),
        completed_len=client.completed_len.as_dict(),
    )
    for row in record["servers"]:
        mean = avg.get(row["url"])
        row["inflight_avg"] = None if mean is None else round(mean, 2)
    return record


def _fleet(
    urls: list[str], spec: MonitorSpec, headers: Mapping[str, str] | None, clock: Callable[[], float]
) -> FleetMonitor:
    """The run's scrapes of its servers, as ``monitor`` says (with the API key's headers)."""
    return FleetMonitor(
        urls,
        interval_s=spec.scrape_interval_s,
        timeout_s=spec.scrape_timeout_s,
        window_s=spec.rate_window_s,
        flap_window_s=spec.doctor.flap_window_s,
        headers=dict(headers or {}),
        clock=clock,
    )


class RunMonitor:
    """Watches one run; start it beside the dispatcher, hand it every display tick, stop it at the end."""

    def __init__(
        self,
        job: JobSpec,
        dispatcher: Dispatcher,
        out: Path,
        run_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        partition: int | None = None,
        tuner: Autotuner | None = None,
        headers: Mapping[str, str] | None = None,  # the API key's (run/access.py)
    ) -> None:
        spec = job.monitor
        self.spec = spec
        self.max_tokens = job.sampling.max_tokens
        self.ignore_eos = sends_ignore_eos(job.sampling.extra_body)  # SGLang's admission per request kind
        self.conversation_turns = job.input.conversation_turns
        self.seeded = job.sampling.seed is not None
        self._seed_warned: set[str] = set()
        self.dispatcher = dispatcher
        self.clock = clock
        urls = [s.url for s in dispatcher.servers]
        self.client = ClientMetrics(urls)
        dispatcher.observer = self.client.observe
        self.fleet = _fleet(urls, spec, headers, clock)
        self.doctor = DoctorState(spec.doctor.confirm_rounds)
        # planned for the job's requests: the observation's ClientObs carries their max_tokens and ignore_eos
        self.predictor = self._predictor(spec.gpu)
        self.expected: dict[str, Expected] = {}  # what the planner expects of each server, on its own clock
        self.eta_fit = EtaFit(self.predictor)  # eta fitted to each server's own decode samples
        self.planned: dict[str, float] = {}  # each server's planned output tok/s at its fitted eta (wall clock)
        # monitor.compare_gpu: the same servers planned on another GPU (the model as the predictor resolves it)
        self.compare = self._predictor(spec.compare_gpu) if spec.compare_gpu else None
        self.compared: dict[str, Expected] = {}
        self.events = EventLog(out / events_file(partition), run_id, wall)
        self.info = RunInfo(run_id, job.model, partition, out, *job.output.upload.backlog_limit())
        self.exporter = Exporter(self, spec.metrics_host, spec.metrics_port) if spec.metrics_port is not None else None
        self.metrics_url: str | None = None
        self.cpu = CpuMeter(clock)
        self.cpu_share: float | None = None
        self.last: Snapshot | None = None
        self._inflight = {u: GaugeWindow(spec.rate_window_s) for u in urls}
        self._task: asyncio.Task[None] | None = None
        self._shown_s: dict[str, float] = {}  # how long each verdict has been shown
        self._binds: dict[str, str] = {}
        self._last_round: float | None = None
        self._next_event = 0.0
        self._job = job
        self._oversub_checked = False
        self.tuner = tuner
        if tuner is not None:
            tuner.bind(emit=lambda record: self.events.write("autotune", **record), refresh=self.fleet.refresh_info)

    def _predictor(self, gpu: str | None) -> PlannerPredictor:
        spec = self.spec
        return PlannerPredictor(spec.planner_model, gpu, gpu_file=spec.gpu_file)

    async def start(self, total: int | None, done_before: int) -> None:
        job = self._job
        self.events.write(
            "start",
            format=EVENT_FORMAT,
            model=job.model,
            api=job.api,
            servers=[s.url for s in self.dispatcher.servers],
            concurrency=job.concurrency,
            output=job.output.dir,
            total=total,
            done_before=done_before,
        )
        if self.exporter is not None:
            try:
                self.metrics_url = await self.exporter.start()
            except ConfigError as exc:  # a busy port must not stop a long run: say so loudly and go on
                log.warning("%s; the run goes on without the metrics port", exc)
                self.exporter = None
            else:
                log.info("metrics for Prometheus at %s", self.metrics_url)
                log.info("the run's live page at %s", self.metrics_url.removesuffix("metrics"))
        if self.spec.enabled:
            self._task = asyncio.create_task(self.fleet.run(self._round), name="tokenmill-monitor")

    def observation(self, views: list[ServerView]) -> Observation:
        now = self.clock()
        states = {s.url: s for s in self.dispatcher.servers}
        servers = []
        for v in views:
            s = states.get(v.url)
            if s is None:  # removed from the fleet since this round's scrape
                continue
            window = self._inflight.setdefault(v.url, GaugeWindow(self.spec.rate_window_s))
            window.add(now, float(s.inflight))
            side = ClientSide(
                inflight=window.mean(),
                limit=s.limit,
                usable=s.usable,
                problem=s.problem,
                timeouts=s.timeouts,
                timeout_age_s=None if s.last_timeout_at is None else max(0.0, now - s.last_timeout_at),
                read_timeout_s=self._job.retry.read_timeout_s,
                abandoned_tokens=s.abandoned_tokens,
                work_timeouts=s.work_timeouts,
                last_timeout=s.last_timeout,
                read_timeout_now_s=s.read_timeout_s or self._job.retry.read_timeout_s,
                read_timeout_max_s=max(self._job.retry.read_timeout_s, self._job.retry.read_timeout_max_s),
                work_cuts=s.work_cuts,
                errors=s.errors,
                completed_age_s=None if s.last_completed_at is None else max(0.0, now - s.last_completed_at),
            )
            servers.append(ServerObs(v, side))
        snap = self.last
        client = ClientObs(
            cpu=self.cpu_share,
            loop_lag_s=self.fleet.loop_lag_s,
            avg_prompt_tokens=self.client.avg_prompt_tokens,
            avg_output_tokens=self.client.avg_output_tokens,
            completions_s=snap.comp_s if snap is not None else None,
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            answers=self.client.answers,
            truncated=self.client.truncated,
            completed_p50=self.client.completed_len.quantile(0.5),
            completed_p90=self.client.completed_len.quantile(0.9),
            upload_pending=(snap.upload_pending or 0) if snap is not None else 0,
            upload_pending_bytes=snap.upload_pending_bytes if snap is not None else 0,
            upload_oldest_s=snap.upload_oldest_s if snap is not None else None,
            upload_error=snap.upload_error if snap is not None else None,
            upload_held=snap.held if snap is not None else None,
        )
        return Observation(tuple(servers), client)

    def _warn_ignored_seed(self, views: list[ServerView]) -> None:
        """SGLang uses a request's seed only with --enable-deterministic-inference: say so once per server."""
        for v in views:
            if v.info is not None and v.info.deterministic is False and v.url not in self._seed_warned:
                self._seed_warned.add(v.url)
                log.warning(
                    "%s ignores sampling.seed: SGLang applies per-request seeds only when started with "
                    "--enable-deterministic-inference (answers are not reproducible as configured)",
                    v.url,
                )

    def _share_gauges(self, views: list[ServerView]) -> None:
        """Each server's latest queue and running gauges to the dispatcher (read when a request times out: a
        server that holds a queue is overloaded, not dead); an unhealthy scrape shows nothing."""
        states = {s.url: s for s in self.dispatcher.servers}
        for v in views:
            state = states.get(v.url)
            if state is None:
                continue
            snap = v.snapshot if v.healthy else None
            if snap is None:
                state.saw(None, None, None)
            else:
                state.saw(snap.queued, snap.running, v.decode_tok_s)

    def _warn_oversubscribed(self, views: list[ServerView]) -> None:
        """A fixed concurrency far above what the servers hold (their max running + the queue the controller
        keeps): said once, as soon as every server's cap is known (the controller sends no more than they hold)."""
        if self._oversub_checked or self.dispatcher.adaptive:
            return
        caps = [v.max_running for v in views if v.healthy]
        if not caps or any(not c for c in caps):
            return
        self._oversub_checked = True
        holds = sum(c + queue_for(c, self._job.control) for c in caps if c)
        wanted = self.dispatcher.pool.first_limit * len(caps)
        if wanted > self._job.control.oversubscribed * holds:
            log.warning(
                "concurrency %s asks for %d requests at once from servers that run %d and keep a queue of %d: "
                "tokenmill sends each server at most what it runs plus that queue (about %d), since the rest would "
                "only wait in their queues and may outlive the read timeout (retry.read_timeout_s %.0f s)",
                self._job.concurrency,
                wanted,
                sum(c for c in caps if c),
                holds - sum(c for c in caps if c),
                math.ceil(holds / len(caps)),
                self._job.retry.read_timeout_s,
            )

    async def _round(self, views: list[ServerView], tune: bool = True) -> None:
        self.fleet.sync([s.url for s in self.dispatcher.servers])  # `tokenmill fleet` may add or drain servers
        self._share_gauges(views)
        self._warn_oversubscribed(views)
        if self.seeded:
            self._warn_ignored_seed(views)
        self.cpu_share = self.cpu.sample()
        obs = self.observation(views)
        verdicts = await asyncio.to_thread(diagnose, obs, self.spec.doctor, self.predictor)
        self.expected = await asyncio.to_thread(self._expected, obs)
        if self.compare is not None:
            self.compared = await asyncio.to_thread(self._expected, obs, self.compare)
        await asyncio.to_thread(self.eta_fit.update, obs.servers, obs.client)
        self.planned = await asyncio.to_thread(self._planned, obs)
        for est in self.eta_fit.changed():
            self.events.write("eta", **est.as_dict())
        if self.doctor.update(verdicts):
            self._verdicts_changed(self.doctor.shown)
        if self.tuner is not None and tune:
            confirmed = [v for v in self.doctor.shown if self.doctor.confirmed(v.rule) >= self.doctor.confirm]
            self.tuner.round(views, confirmed, self.last.eta_s if self.last is not None else None)
        now = self.clock()
        top = binding_verdict(self.doctor.shown)  # the verdict every view names the binding resource by
        if self._last_round is not None and top is not None:
            self._shown_s[top.rule] = self._shown_s.get(top.rule, 0.0) + now - self._last_round
            self._binds[top.rule] = top.binds
        self._last_round = now

    def _expected(self, obs: Observation, predictor: PlannerPredictor | None = None) -> dict[str, Expected]:
        """The planner's expected rate and roofline ceiling of each healthy server it can plan, on the server's
        own clock (a twin at time scale s runs 1/s times the GPU's rate)."""
        out: dict[str, Expected] = {}
        for server in obs.servers:
            if not server.view.healthy:
                continue
            exp = (predictor or self.predictor).expected(server, obs.client)
            if exp is None:
                continue
            info = server.view.info
            scale = info.time_scale if info is not None and info.time_scale else 1.0
            out[server.url] = replace(exp, tok_s=exp.tok_s / scale, ceiling_tok_s=exp.ceiling_tok_s / scale)
        return out

    def _planned(self, obs: Observation) -> dict[str, float]:
        """Each healthy server's planned output rate at the eta fitted to its own samples, on the wall clock (a twin
        at time scale s runs 1/s times the GPU's rate): the ETA's planned rate (:mod:`tokenmill.run.eta`)."""
        out: dict[str, float] = {}
        for server in obs.servers:
            est = self.eta_fit.estimates.get(server.url)
            if est is None or not server.view.healthy:
                continue
            rate = self.predictor.rate_at(server, obs.client, est.eta_bw)
            if rate is None:
                continue
            info = server.view.info
            out[server.url] = rate / (info.time_scale if info is not None and info.time_scale else 1.0)
        return out

    @property
    def binding(self) -> str | None:
        """The resource that bound longest so far (the first verdict's, round by round)."""
        if not self._shown_s:
            return None
        rule = max(self._shown_s, key=lambda r: self._shown_s[r])
        return self._binds[rule]

    def state(self) -> WatchState:
        """What the tracker reads of the watch now, copied into a value that later rounds do not change."""
        return WatchState(
            views=tuple(self.fleet.views),
            verdicts=tuple(self.doctor.shown),
            binding=self.binding,
            cpu=self.cpu_share,
            loop_lag_s=self.fleet.loop_lag_s,
            autotune=self.tuner.status() if self.tuner is not None else None,
            answers=self.client.answers,
            truncated=self.client.truncated,
            mean_output=self.client.avg_output_tokens,
            max_tokens=self.max_tokens,
            conversation_turns=self.conversation_turns,
            planned=frozen_map(self.planned),
            expected=frozen_map(self.expected),
            compared=frozen_map(self.compared),
        )

    def _verdicts_changed(self, shown: list[Verdict]) -> None:
        self.events.write("verdicts", verdicts=[v.as_dict() for v in shown])
        if not shown:
            log.info("doctor: no problem found any more")
        for v in shown:
            log.warning("doctor: %s", v.line())

    def tick(self, snap: Snapshot) -> None:
        """Called with every display snapshot; writes a ``tick`` record every ``event_interval_s``."""
        self.last = snap
        if self.exporter is not None:
            self.exporter.timeline.add(self.events.wall(), snap)  # the live page's plots
        now = self.clock()
        if now >= self._next_event:
            self._next_event = now + self.spec.event_interval_s
            self.events.write("tick", **tick_record(snap, self.client, self._inflight_means()))

    def _inflight_means(self) -> dict[str, float | None]:
        return {url: w.mean() for url, w in self._inflight.items()}

    async def stop(self, final: Snapshot, finished: bool) -> None:
        """Stop scraping and serving; the last ``tick`` and the ``end`` record go to the event log. A finished
        run gets one more doctor round, on its final counts (a short run may end before its first round)."""
        watched = self._task is not None  # the monitor ran (not off: scrape_interval_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.last = final
        if finished and watched:  # the doctor's last look at the run (a short one may end before its first round)
            await self._round(self.fleet.views, tune=False)
        if self.tuner is not None:
            self.tuner.stop()
        self.events.write("tick", **tick_record(final, self.client, self._inflight_means()))
        self.events.write("end", elapsed_s=round(final.elapsed_s, 2), finished=finished)
        self.events.close()
        if self.exporter is not None:
            await self.exporter.stop()
