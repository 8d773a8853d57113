"""One tick of a run, as every display shows it: the client's counters and rates, each server's scraped
numbers, and the doctor's verdicts. Plain data: the dashboard, status lines, the event log, the summary and the
exporter all render this, and nothing here knows how it was computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tokenmill.fmt import duration


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


@dataclass(slots=True)
class ServerRow:
    """One server: the client's counters, and the server's own numbers when it is scraped."""

    url: str
    inflight: int
    limit: int
    completed: int
    errors: int
    tok_s: float  # client-side: output tokens of completed requests per second
    usable: bool
    problem: str | None
    healthy: bool | None = None  # None: not scraped
    running: float | None = None
    max_running: int | None = None
    queued: float | None = None
    kv_usage: float | None = None
    state_usage: float | None = None
    server_tok_s: float | None = None  # the server's decode rate
    prompt_tok_s: float | None = None
    gpus: int = 1
    output_tokens: float = 0.0  # tokens the server decoded while watched
    limit_reason: str | None = None  # why the in-flight target is what it is (concurrency: auto)


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
    comp_s: float
    tok_s: float  # client-effective output tok/s
    eta_s: float | None
    servers: list[ServerRow]
    waiting: bool
    last_failure: str | None
    server_tok_s: float | None = None  # the fleet's decode tok/s from the servers' counters
    history: tuple[float, ...] = ()  # throughput, oldest first (the sparkline)
    verdicts: tuple[Diagnosis, ...] = ()
    cpu: float | None = None  # client process, share of one core
    loop_lag_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    limit: int = 0  # the client's total in-flight limit
    binding: str | None = None  # the resource the doctor found binding longest in this run

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.servers)


def status_line(snap: Snapshot) -> str:
    """One concise line for logs (nohup, CI)."""
    total = f"/{snap.total}" if snap.total is not None else ""
    usable = sum(1 for r in snap.servers if r.usable)
    server = f" (servers decode {snap.server_tok_s:,.0f})" if snap.server_tok_s is not None else ""
    line = (
        f"done {snap.done}{total} | {snap.comp_s:.1f} compl/s | {snap.tok_s:.0f} out tok/s{server} | "
        f"in flight {snap.inflight} | failed {snap.failed} | retries {snap.retries} | "
        f"servers {usable}/{len(snap.servers)} | elapsed {duration(snap.elapsed_s)} | "
        f"ETA {duration(snap.eta_s)}"
    )
    if snap.waiting:
        line += " | WAITING: no server is usable"
    if snap.verdicts:
        line += f" | doctor: {snap.verdicts[0].title} ({snap.verdicts[0].where()})"
    return line
