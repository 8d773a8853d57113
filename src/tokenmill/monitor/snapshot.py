"""One tick of a run, as every display shows it: the client's counters and rates, each server's scraped
numbers, and the doctor's verdicts. Plain data: the dashboard, status lines, the event log, the summary and the
exporter all render this, and nothing here knows how it was computed.

One name per quantity, saying whose number it is, everywhere from the monitor's
:class:`~tokenmill.monitor.fleet.ServerView` to the event log, the summary, ``tokenmill status`` and the report:

- ``client_tok_s``: output tokens of completed requests per second, as the client counts them (a server's, or
  the whole run's); ``client_tokens``: those output tokens themselves;
- ``decode_tok_s``: a server's decode rate from its own counters (the fleet's total on a :class:`Snapshot`);
  ``decoded_tokens``: the tokens a server decoded while watched; ``prompt_tok_s``: its prefill rate;
- ``kv_usage``, ``state_usage``: how full a server's KV and recurrent-state pools are (0-1);
- ``answers``: answers received in this run (each turn of a conversation counts), ``truncated``: those that hit
  ``max_tokens`` (finish reason ``length``), :attr:`Snapshot.truncated_share` the one over the other;
- ``rows_read``, ``multi_turn_rows``: input rows read so far, and those with several user turns (what the job
  does with them: ``conversation_turns``);
- ``abandoned``, ``abandoned_tokens``: requests given up on a read timeout while their server was overloaded, and
  their output tokens (estimated: time spent x that server's per-request rate, at most max_tokens), decoded by
  the servers and thrown away; a server's ``timeouts`` are its share of them;
- ``upload_pending`` (None without ``output.remote``), ``upload_pending_bytes``, ``upload_oldest_s``,
  ``upload_error``: sealed shards waiting for upload, their bytes, how long the oldest has waited, and the
  store's error while it fails; ``held``: why generation is paused (``output.upload.max_backlog``);
- ``counts``: the run counters of the metric table (``tokenmill.run.metrics``) that have no field here.

The phrases every view builds of these numbers are :mod:`tokenmill.monitor.lines`. The event log's ``tick``
record is :meth:`Snapshot.to_event` (the field names of these classes) and is read back by
:meth:`Snapshot.from_event`, which also reads the ticks of logs written before these names (format 1, see
:func:`upgrade_tick`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

from tokenmill.monitor.events import EVENT_FORMAT


class Diagnosis(Protocol):
    """What the displays read of a doctor's verdict (:class:`tokenmill.doctor.model.Verdict`)."""

    @property
    def rule(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def binds(self) -> str: ...

    @property
    def severity(self) -> str: ...

    @property
    def summary(self) -> str: ...

    def where(self) -> str: ...

    def line(self) -> str: ...


D = TypeVar("D", bound=Diagnosis)


def binding_verdict(verdicts: Sequence[D]) -> D | None:
    """The verdict that names the binding resource, the one rule every view uses (summary, ``tokenmill status``,
    the report, the dashboard, the doctor's headline): the first of the ranked verdicts that binds a resource (a
    verdict about the corpus or the upload binds none). Verdicts are always ranked, highest predicted impact
    first (the doctor's ``rank``, and the order a run shows them in)."""
    return next((v for v in verdicts if v.binds), None)


def binding_text(verdicts: Sequence[Diagnosis]) -> str | None:
    """``KV cache (KV bound)``: the binding resource and the verdict that names it (None: nothing binds)."""
    v = binding_verdict(verdicts)
    return None if v is None else f"{v.binds} ({v.title})"


@dataclass(frozen=True, slots=True)
class RecordedVerdict:
    """A verdict as a ``tick`` of the event log carries it: what the displays read of it, no evidence."""

    rule: str
    title: str
    binds: str
    severity: str
    summary: str
    at: str  # where(): the server, "client" or "k/n servers"
    text: str  # line(): the one-line form

    def where(self) -> str:
        return self.at

    def line(self) -> str:
        return self.text

    @staticmethod
    def to_event(v: Diagnosis) -> dict[str, str]:
        return {
            "rule": v.rule,
            "title": v.title,
            "binds": v.binds,
            "severity": v.severity,
            "summary": v.summary,
            "where": v.where(),
            "line": v.line(),
        }

    @classmethod
    def from_event(cls, rec: dict[str, Any]) -> RecordedVerdict:
        rule = str(rec.get("rule") or "?")
        return cls(
            rule=rule,
            title=str(rec.get("title") or rule),
            binds=str(rec.get("binds") or ""),
            severity=str(rec.get("severity") or "info"),
            summary=str(rec.get("summary") or ""),
            at=str(rec.get("where") or ""),
            text=str(rec.get("line") or rule),
        )


# decimals kept in the event log; a name means the same quantity on every class, so it rounds the same way.
# Counts, times and token totals are written as they are: the summary is derived from them.
_DECIMALS = {
    "comp_s": 3,
    "client_tok_s": 1,
    "decode_tok_s": 1,
    "prompt_tok_s": 1,
    "running": 1,
    "queued": 1,
    "kv_usage": 3,
    "state_usage": 3,
    "cpu": 3,
    "loop_lag_s": 3,
    "abandoned_tokens": 0,
    "upload_oldest_s": 1,
    "expected_tok_s": 1,
    "ceiling_tok_s": 1,
    "compare_tok_s": 1,
}


def _encode(name: str, value: Any) -> Any:
    places = _DECIMALS.get(name)
    return round(value, places) if places is not None and isinstance(value, float) else value


@dataclass(slots=True)
class ServerRow:
    """One server: the client's counters, and the server's own numbers when it is scraped."""

    url: str
    inflight: int
    limit: int
    completed: int
    errors: int
    client_tok_s: float  # output tokens of this server's completed requests per second (client side)
    usable: bool
    problem: str | None
    client_tokens: int = 0  # output tokens of this server's completions in this run (client side)
    healthy: bool | None = None  # None: not scraped
    running: float | None = None
    max_running: int | None = None
    queued: float | None = None
    kv_usage: float | None = None
    state_usage: float | None = None
    decode_tok_s: float | None = None  # the server's decode rate from its own counters
    prompt_tok_s: float | None = None
    gpus: int = 1
    decoded_tokens: float = 0.0  # tokens the server decoded while watched (its counters)
    limit_reason: str | None = None  # why the in-flight target is what it is (concurrency: auto)
    timeouts: int = 0  # its requests that outlived the read timeout while it was busy (overload)
    read_timeout_s: float | None = None  # its read timeout now, when grown past the job's (None: the job's)
    missed_scrapes: int = 0  # its scrapes in a row that timed out (a monitoring gap, not a server down)
    abandoned_tokens: float = 0.0  # their estimated output tokens
    # what the planner expects of this server (its flags, GPU, the workload so far) and the roofline's ceiling,
    # decode tok/s on the server's own clock (a twin's time scale applied), so decode_tok_s compares directly
    expected_tok_s: float | None = None
    ceiling_tok_s: float | None = None
    gpu: str | None = None  # the GPU those were planned for
    compare_tok_s: float | None = None  # monitor.compare_gpu: the same planned on that GPU (this server's clock)
    compare_gpu: str | None = None
    time_scale: float | None = None  # a twin's (/server_info): its rates run 1/time_scale times the GPU's

    def to_event(self) -> dict[str, Any]:
        return {f.name: _encode(f.name, getattr(self, f.name)) for f in fields(self)}

    @property
    def expected_share(self) -> float | None:
        """The server's decode rate as a share of what the planner expects of it."""
        if self.decode_tok_s is None or not self.expected_tok_s:
            return None
        return self.decode_tok_s / self.expected_tok_s

    @classmethod
    def from_event(cls, rec: dict[str, Any]) -> ServerRow:
        """A row of a ``tick`` (today's keys; extra keys such as ``inflight_avg`` are left out)."""
        return cls(**{**_ROW_REQUIRED, **_known(cls, rec)})


@dataclass(slots=True)
class Snapshot:
    """What every display shows, computed once per tick."""

    elapsed_s: float
    done: int  # completed + failed, including earlier runs
    total: int | None
    completed: int
    failed: int
    skipped: int
    retries: int
    inflight: int
    comp_s: float  # completed + failed per second, over the rate window
    client_tok_s: float  # output tokens of completed requests per second, as the client counts them
    eta_s: float | None
    servers: list[ServerRow]
    waiting: bool
    last_failure: str | None
    decode_tok_s: float | None = None  # the fleet's decode tok/s from the servers' counters
    history: tuple[float, ...] = ()  # throughput, oldest first (the sparkline; not in the event log)
    verdicts: tuple[Diagnosis, ...] = ()
    cpu: float | None = None  # client process, share of one core
    loop_lag_s: float | None = None
    prompt_tokens: int = 0
    client_tokens: int = 0  # output tokens of this run's completions (client side)
    limit: int = 0  # the client's total in-flight limit
    binding: str | None = None  # the resource the doctor found binding longest in this run
    autotune: str | None = None  # what --autotune is doing (one line), when it runs
    answers: int = 0  # answers received this run (every turn of a conversation counts)
    truncated: int = 0  # of them, cut at max_tokens (finish reason "length")
    max_tokens: int | None = None  # the job's sampling.max_tokens
    rows_read: int = 0  # input rows read so far (rows already done included)
    multi_turn_rows: int = 0  # of them, rows with several user turns
    conversation_turns: str | None = None  # what the job does with them (input.conversation_turns)
    abandoned: int = 0  # requests given up on a read timeout while their server was overloaded
    abandoned_tokens: float = 0.0  # their estimated output tokens, thrown away
    outlived: int = 0  # of them, requests that timed out while their server ran them (nothing queued)
    repeatedly_abandoned: int = 0  # prompts abandoned retry.abandoned_report_after times or more
    upload_pending: int | None = None  # sealed shards waiting for upload (None: no output.remote)
    upload_pending_bytes: int = 0
    upload_oldest_s: float | None = None  # how long the oldest of them has waited
    upload_error: str | None = None  # the store's last error, while it fails
    held: str | None = None  # why generation is paused (None: it is not)
    # the run counters of the metric table (tokenmill.run.metrics) that have no field of their own, by their
    # event-log names: the tick writes them under client.counts, the summary shows them
    counts: dict[str, float] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.servers)

    def expected_shares(self, over_run: bool = False) -> tuple[float, float] | None:
        """The fleet's decode rate as a share of what the planner expects and of the roofline's ceiling, over
        the servers the planner has a picture of (None when it has none): the last window's rate, or with
        ``over_run`` the run's (the tokens each server decoded while watched, over the run's time)."""
        rows = [r for r in self.servers if r.expected_share is not None and r.ceiling_tok_s]
        if not rows:
            return None
        if over_run:
            measured = sum(r.decoded_tokens for r in rows) / max(self.elapsed_s, 1e-9)
        else:
            measured = sum(r.decode_tok_s or 0.0 for r in rows)
        return measured / sum(r.expected_tok_s or 0.0 for r in rows), measured / sum(
            r.ceiling_tok_s or 0.0 for r in rows
        )

    @property
    def truncated_share(self) -> float | None:
        """Share of this run's answers that hit max_tokens (None before the first answer)."""
        return self.truncated / self.answers if self.answers else None

    def to_event(self) -> dict[str, Any]:
        """The event log's ``tick`` record (without ``kind``, ``t`` and ``run``): ``elapsed_s``, the run's numbers
        under ``client``, a row per server under ``servers``, the verdicts shown and the binding resource."""
        return {
            "elapsed_s": self.elapsed_s,
            "client": {
                f.name: _encode(f.name, getattr(self, f.name))
                for f in fields(self)
                if f.name not in _NOT_CLIENT and (f.name != "counts" or self.counts)  # no counter: as before
            },
            "servers": [r.to_event() for r in self.servers],
            "verdicts": [RecordedVerdict.to_event(v) for v in self.verdicts],
            "binding": self.binding,
        }

    @classmethod
    def from_event(cls, rec: dict[str, Any], fmt: int = EVENT_FORMAT) -> Snapshot:
        """The snapshot a ``tick`` record holds; ``fmt`` is the ``format`` of its run's ``start`` record (1 when
        it has none). Verdicts come back as :class:`RecordedVerdict`; the history is empty."""
        rec = upgrade_tick(rec, fmt)
        client = {k: v for k, v in _known(cls, rec.get("client") or {}).items() if k not in _NOT_CLIENT}
        client["counts"] = _numbers(client.get("counts"))
        return cls(
            elapsed_s=float(rec.get("elapsed_s") or 0.0),
            servers=[ServerRow.from_event(r) for r in rec.get("servers") or [] if isinstance(r, dict)],
            verdicts=tuple(RecordedVerdict.from_event(v) for v in rec.get("verdicts") or [] if isinstance(v, dict)),
            binding=rec.get("binding"),
            **{**_SNAPSHOT_REQUIRED, **client},
        )


# what a tick holds outside its ``client`` part (the history is not written at all)
_NOT_CLIENT = frozenset({"elapsed_s", "servers", "verdicts", "binding", "history"})
# fields without a default, for a record that lacks them
_ROW_REQUIRED: dict[str, Any] = {
    "url": "?", "inflight": 0, "limit": 0, "completed": 0, "errors": 0, "client_tok_s": 0.0, "usable": True,
    "problem": None,
}  # fmt: skip
_SNAPSHOT_REQUIRED: dict[str, Any] = {
    "done": 0, "total": None, "completed": 0, "failed": 0, "skipped": 0, "retries": 0, "inflight": 0,
    "comp_s": 0.0, "client_tok_s": 0.0, "eta_s": None, "waiting": False, "last_failure": None,
}  # fmt: skip


def _known(cls: type[Any], rec: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` that ``rec`` gives a value (null is no value: the field's default stands)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in rec.items() if k in names and v is not None}


def _numbers(rec: Any) -> dict[str, float]:
    """The numbers of a decoded ``counts`` (anything else left out)."""
    if not isinstance(rec, dict):
        return {}
    return {str(k): float(v) for k, v in rec.items() if isinstance(v, int | float) and not isinstance(v, bool)}


# Format 1 (before the format number): the old key of each renamed field, per level of the tick.
V1_TICK = {"elapsed": "elapsed_s"}
V1_CLIENT = {
    "tok_s": "client_tok_s",  # at the client level, the client-effective rate
    "server_tok_s": "decode_tok_s",
    "completion_tokens": "client_tokens",
}
V1_SERVER = {
    "tok_s": "decode_tok_s",  # inside servers[], the server's decode rate
    "kv": "kv_usage",
    "state": "state_usage",
    "output_tokens": "decoded_tokens",
}


def _renamed(rec: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    return {aliases.get(k, k): v for k, v in rec.items()}


def upgrade_tick(rec: dict[str, Any], fmt: int) -> dict[str, Any]:
    """A ``tick`` record of a format-``fmt`` log with today's keys (a new dict; format 2 is returned as is).

    Format 1 named the quantities by hand (``tok_s`` was the server's decode rate in ``servers[]`` but the
    client's rate in ``client``) and listed verdicts by rule name only. No old key is a key of format 2, so a
    format-2 record read as format 1 comes back unchanged: a reader unsure of a record's format may upgrade it."""
    if fmt >= EVENT_FORMAT:
        return rec
    out = _renamed(rec, V1_TICK)
    out["client"] = _renamed(rec.get("client") or {}, V1_CLIENT)
    out["servers"] = [_renamed(r, V1_SERVER) for r in rec.get("servers") or [] if isinstance(r, dict)]
    out["verdicts"] = [{"rule": v} if isinstance(v, str) else v for v in rec.get("verdicts") or []]
    return out
