"""The run's numbers as Prometheus sees them, one row each: name, type, help, labels and where the value comes from.

The exporter (:mod:`tokenmill.run.prometheus`) serves exactly these rows, and the Grafana board and the alert rules
of ``observability/`` are generated from them (``scripts/gen_observability.py``; a test fails when a panel or a rule
queries a name no row exports). A new number is one row here: its reader is a small function of the watched run.

A run counter (a row with ``stat``: the name of a :class:`~tokenmill.run.work.DispatchStats` field, or of a
counter it keeps in ``counts``: ``stats.count(stat)`` where the event happens) is one row for everything that
shows it: the tracker copies it into the snapshot (:func:`run_counters`; a counter without a
field of its own goes to ``Snapshot.counts``), the event log's tick writes it (under ``client``, or
``client.counts``), ``tokenmill status`` reads it back, the summary shows it under its ``summary`` label and the
exporter serves it as ``NAME_total``.

Names are Prometheus's: a counter row ``tokenmill_failures`` is scraped as ``tokenmill_failures_total``, a
histogram as ``_bucket``, ``_sum`` and ``_count`` (:meth:`Metric.series`). A reader yields (label values, value)
pairs and yields nothing while the value is unknown, so a panel shows a gap, never a made-up zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tokenmill.monitor.snapshot import binding_verdict

if TYPE_CHECKING:
    from tokenmill.monitor.client import ClientMetrics
    from tokenmill.monitor.snapshot import Snapshot
    from tokenmill.run.dispatch import Dispatcher
    from tokenmill.run.watchstate import WatchState
    from tokenmill.run.work import DispatchStats

Kind = Literal["counter", "gauge", "histogram"]
Sample = tuple[tuple[str, ...], Any]  # label values, and a float (a Histogram for a histogram row)


class Watched(Protocol):
    """What the rows read of a watched run (:class:`tokenmill.run.watch.RunMonitor` is one): the dispatcher's and
    the client's counters, the latest snapshot, what the run is, and the watch's own numbers only through its
    frozen :meth:`state`."""

    @property
    def dispatcher(self) -> Dispatcher: ...
    @property
    def client(self) -> ClientMetrics: ...
    @property
    def last(self) -> Snapshot | None: ...
    @property
    def info(self) -> RunInfo: ...
    def state(self) -> WatchState: ...


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a run is, for ``tokenmill_run_info`` and the live page: its id, model, partition and limits."""

    run: str
    model: str
    partition: int | None
    out: Path
    backlog_shards: int | None = None  # output.upload.max_backlog, as shards or bytes (or neither)
    backlog_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Metric:
    """One exported family: what Prometheus calls it, its type and help, its labels, and its reader."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    read: Callable[[Watched], Iterable[Sample]]
    source: str  # where the value comes from, in words (docs/observability.md's table)
    tick: str | None = None  # the event log's name of the same number: a key of a tick's client, or servers[].key
    stat: str | None = None  # a run counter: the dispatcher's counter (DispatchStats) it copies
    summary: str | None = None  # a run counter's label in the summary table (None: not a row of its own there)

    def series(self) -> tuple[str, ...]:
        """The series names a scrape shows for this row."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


def _one(value: float | int | None) -> Iterator[Sample]:
    if value is not None:
        yield (), float(value)


def _snap(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    """A reader of the latest snapshot's ``attr`` (nothing before the first snapshot, or while it is None)."""

    def read(m: Watched) -> Iterable[Sample]:
        return _one(None if m.last is None else getattr(m.last, attr))

    return read


def _upload(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    """Like :func:`_snap`, for a run that uploads (``output.remote``) only."""

    def read(m: Watched) -> Iterable[Sample]:
        snap = m.last
        if snap is None or snap.upload_pending is None:
            return ()
        value = getattr(snap, attr)
        if attr == "upload_oldest_s" and value is None and not snap.upload_pending:
            value = 0.0  # nothing waits: the oldest has waited no time
        return _one(float(bool(value)) if attr == "upload_error" else value)

    return read


def _stat(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    return lambda m: _one(m.dispatcher.stats.value(attr))


def counter(name: str, help: str, stat: str, *, summary: str | None = None, tick: str | None = None) -> Metric:
    """A run counter's row: the dispatcher's counter ``stat``, in the event log as ``tick`` (default: ``stat``)."""
    return Metric(name, "counter", help, (), _stat(stat), "the dispatcher's counters", tick=tick or stat, stat=stat,
                  summary=summary)  # fmt: skip


def _server(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    """A reader of the dispatcher's own numbers of each server (label ``server``)."""
    return lambda m: (((s.url,), float(getattr(s, attr))) for s in m.dispatcher.servers)


def _scraped(attr: str, sglang_absent: float | None = None) -> Callable[[Watched], Iterable[Sample]]:
    """A reader of each scraped server's view (label ``server``; nothing before its first scrape). SGLang writes
    some counters only from their first event on: for a healthy SGLang server without one, ``sglang_absent``."""

    def read(m: Watched) -> Iterable[Sample]:
        for v in m.state().views:
            value = (1.0 if v.healthy else 0.0) if attr == "healthy" else getattr(v, attr)
            if value is None and v.healthy and v.engine == "sglang":
                value = sglang_absent
            if v.scrapes and value is not None:
                yield (v.url,), float(value)

    return read


def _expected(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    return lambda m: (((url, e.gpu), float(getattr(e, attr))) for url, e in sorted(m.state().expected.items()))


def _by(attr: str) -> Callable[[Watched], Iterable[Sample]]:
    """A reader of one of the client's counts by key (error type, finish reason)."""
    return lambda m: (((k,), float(v)) for k, v in sorted(getattr(m.client, attr).items()))


def _truncated(m: Watched) -> Iterable[Sample]:
    c = m.client
    return _one(c.truncated / c.answers if c.answers else None)


def _verdicts(m: Watched) -> Iterable[Sample]:
    return (((v.rule,), 1.0) for v in m.state().verdicts)


def _binding(m: Watched) -> Iterable[Sample]:
    top = binding_verdict(m.state().verdicts)
    return () if top is None else [((top.binds, top.rule), 1.0)]


def _run_info(m: Watched) -> Iterable[Sample]:
    i = m.info
    yield (i.run, i.model, "" if i.partition is None else str(i.partition)), 1.0


def _latency(m: Watched) -> Iterable[Sample]:
    return (((url,), h) for url, h in sorted(m.client.latency.items()))


S = ("server",)
_RUN: tuple[Metric, ...] = (
    Metric("tokenmill_run_info", "gauge", "1, labelled with the run's id, model and partition (empty: none).",
           ("run", "model", "partition"), _run_info, "the job file and the run's id"),
    Metric("tokenmill_input_rows", "gauge", "Input rows (absent until counted).", (), _snap("total"),
           "the feed's count of the input", tick="total"),
    Metric("tokenmill_prompts_done", "gauge", "Prompts completed or failed, all runs.", (), _snap("done"),
           "the done set plus this run's completions and failures", tick="done"),
    Metric("tokenmill_eta_seconds", "gauge", "Estimated seconds to the end.", (), _snap("eta_s"),
           "run/eta.py: the measured rate, or the planner's at the fitted eta", tick="eta_s"),
    counter("tokenmill_failures", "Prompts recorded as failed (failed.jsonl) in this run.", "failed"),
    counter("tokenmill_retries", "Attempts that failed and were retried.", "retries"),
    counter("tokenmill_abandoned_requests",
            "Requests given up on a read timeout while their server was overloaded (retried).", "abandoned"),
    counter("tokenmill_abandoned_output_tokens",
            "Estimated output tokens of those requests (time spent x the per-request rate, at most max_tokens).",
            "abandoned_tokens"),
    Metric("tokenmill_request_errors", "counter", "Failed attempts by error type.", ("error",), _by("errors"),
           "the client's request observer"),
    Metric("tokenmill_finish_reasons", "counter", "Answers by finish reason.", ("reason",), _by("finish_reasons"),
           "the client's request observer"),
    Metric("tokenmill_truncated_ratio", "gauge",
           "Share of this run's answers that hit max_tokens (finish reason length).", (), _truncated,
           "the client's request observer"),
    Metric("tokenmill_max_tokens", "gauge", "The job's sampling.max_tokens.", (),
           lambda m: _one(m.state().max_tokens), "the job file", tick="max_tokens"),
    Metric("tokenmill_inflight_requests", "gauge", "Requests in flight over all servers.", (),
           lambda m: _one(m.dispatcher.inflight), "the dispatcher", tick="inflight"),
    Metric("tokenmill_client_cpu_ratio", "gauge", "Client process CPU, share of one core.", (),
           lambda m: _one(m.state().cpu), "the process's CPU time", tick="cpu"),
    Metric("tokenmill_event_loop_lag_seconds", "gauge", "How late the monitor's timer fired.", (),
           lambda m: _one(m.state().loop_lag_s), "the monitor's timer", tick="loop_lag_s"),
    Metric("tokenmill_generation_paused", "gauge", "1 while generation is paused (upload backlog).", (),
           lambda m: _one(bool(m.dispatcher.stats.held)), "run/backlog.py"),
    Metric("tokenmill_upload_pending_shards", "gauge", "Sealed shards waiting for upload.", (),
           _upload("upload_pending"), "the uploader's status (output.remote only)", tick="upload_pending"),
    Metric("tokenmill_upload_pending_bytes", "gauge", "Bytes of those shards.", (),
           _upload("upload_pending_bytes"), "the uploader's status (output.remote only)", tick="upload_pending_bytes"),
    Metric("tokenmill_upload_oldest_pending_seconds", "gauge", "How long the oldest has waited.", (),
           _upload("upload_oldest_s"), "the uploader's status (output.remote only)", tick="upload_oldest_s"),
    Metric("tokenmill_upload_failing", "gauge", "1 while the store's operations fail.", (),
           _upload("upload_error"), "the uploader's status (output.remote only)"),
    Metric("tokenmill_upload_max_backlog_shards", "gauge", "output.upload.max_backlog, in shards (when so set).",
           (), lambda m: _one(m.info.backlog_shards), "the job file"),
    Metric("tokenmill_upload_max_backlog_bytes", "gauge", "output.upload.max_backlog, in bytes (when so set).",
           (), lambda m: _one(m.info.backlog_bytes), "the job file"),
    Metric("tokenmill_doctor_verdict", "gauge", "1 while the doctor shows this verdict.", ("rule",), _verdicts,
           "the doctor's confirmed verdicts"),
    Metric("tokenmill_binding", "gauge", "1 for the resource the doctor finds binding now (its first verdict).",
           ("resource", "rule"), _binding, "the doctor's first verdict"),
    Metric("tokenmill_output_tokens_per_completion", "histogram", "Output tokens per completion.", (),
           lambda m: [((), m.client.output_len)], "the client's request observer"),
)  # fmt: skip
_SERVERS: tuple[Metric, ...] = (
    Metric("tokenmill_completions", "counter", "Completions written.", S, _server("completed"), "the dispatcher",
           tick="servers[].completed"),
    Metric("tokenmill_output_tokens", "counter", "Output tokens of completions (client side).", S,
           _server("completion_tokens"), "the dispatcher", tick="servers[].client_tokens"),
    Metric("tokenmill_prompt_tokens", "counter", "Prompt tokens sent.", S, _server("prompt_tokens"),
           "the dispatcher"),
    Metric("tokenmill_server_errors", "counter", "Transient errors.", S, _server("errors"), "the dispatcher",
           tick="servers[].errors"),
    Metric("tokenmill_server_overload_timeouts", "counter", "Read timeouts while the server was busy.", S,
           _server("timeouts"), "the dispatcher", tick="servers[].timeouts"),
    Metric("tokenmill_inflight", "gauge", "Requests in flight.", S, _server("inflight"), "the dispatcher",
           tick="servers[].inflight"),
    Metric("tokenmill_inflight_limit", "gauge", "In-flight limit.", S, _server("limit"),
           "the dispatcher (concurrency: auto moves it)", tick="servers[].limit"),
    Metric("tokenmill_server_usable", "gauge", "1 unless set aside.", S, _server("usable"), "the dispatcher",
           tick="servers[].usable"),
    Metric("tokenmill_request_latency_seconds", "histogram", "Latency of finished attempts.", S, _latency,
           "the client's request observer"),
    Metric("tokenmill_server_up", "gauge", "1 when the server's /metrics answers.", S, _scraped("healthy"),
           "the monitor's scrapes", tick="servers[].healthy"),
    Metric("tokenmill_server_running", "gauge", "Running requests (window mean).", S, _scraped("running"),
           "the monitor's scrapes", tick="servers[].running"),
    Metric("tokenmill_server_queued", "gauge", "Queued requests (window mean).", S, _scraped("queued"),
           "the monitor's scrapes", tick="servers[].queued"),
    Metric("tokenmill_server_max_running", "gauge", "The server's max running requests.", S,
           _scraped("max_running"), "/server_info, else the scrapes", tick="servers[].max_running"),
    Metric("tokenmill_server_kv_usage", "gauge", "KV pool usage, 0-1 (window mean).", S, _scraped("kv_usage"),
           "the monitor's scrapes", tick="servers[].kv_usage"),
    Metric("tokenmill_server_state_usage", "gauge", "Recurrent-state pool usage, 0-1 (window mean).", S,
           _scraped("state_usage"), "the monitor's scrapes (hybrid models)", tick="servers[].state_usage"),
    Metric("tokenmill_server_decode_tokens_per_second", "gauge",
           "The server's decode rate from its counters, over the window.", S, _scraped("decode_tok_s"),
           "the monitor's scrapes", tick="servers[].decode_tok_s"),
    Metric("tokenmill_server_retractions_per_minute", "gauge",
           "Retracted (SGLang) or preempted (vLLM) requests per minute, over the window.", S,
           _scraped("preemptions_per_min", 0.0), "the monitor's scrapes (SGLang: none until its first)"),
    Metric("tokenmill_server_expected_decode_tokens_per_second", "gauge",
           "What the planner expects of the server (its flags, GPU, the workload so far), on its own clock.",
           ("server", "gpu"), _expected("tok_s"), "the planner, each doctor round", tick="servers[].expected_tok_s"),
    Metric("tokenmill_server_roofline_decode_tokens_per_second", "gauge",
           "The roofline's ceiling for the same, on the server's own clock.", ("server", "gpu"),
           _expected("ceiling_tok_s"), "the planner, each doctor round", tick="servers[].ceiling_tok_s"),
)  # fmt: skip
METRICS: tuple[Metric, ...] = _SERVERS + _RUN


def rows() -> tuple[Metric, ...]:
    """The table, as everything it drives reads it (at call time)."""
    return METRICS


def run_counters(stats: DispatchStats) -> dict[str, Any]:
    """The run counters of the table, read off the dispatcher's ``stats``, by their event-log names."""
    return {m.tick or m.stat: stats.value(m.stat) for m in rows() if m.stat}


def summary_counters() -> tuple[Metric, ...]:
    """The run counters the summary shows as rows of their own: those with a ``summary`` label."""
    return tuple(m for m in rows() if m.stat and m.summary)


def exported_series() -> frozenset[str]:
    """Every series name a scrape of the exporter can show."""
    return frozenset(s for m in rows() for s in m.series())


def metric(name: str) -> Metric:
    """The row named ``name`` (KeyError for none)."""
    return {m.name: m for m in rows()}[name]
