"""The summary table: printed and saved as ``OUT/summary.md`` (and ``summary.json``) at the end of a run,
and rebuilt at any time from the event log by ``tokenmill status`` (also while a run is in progress).

Both come from one builder, :meth:`Summary.from_snapshot`: the end of a run hands it the final snapshot,
``tokenmill status`` the same snapshot decoded from the event log's last ``tick``, so the two tables agree.
Rates here are over the whole run; the names are the snapshot's (see :mod:`tokenmill.monitor.snapshot`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from tokenmill.fmt import duration
from tokenmill.monitor.lines import cut_text, expected_text, scaled, time_scale_text, upload_text
from tokenmill.monitor.snapshot import Snapshot, binding_verdict
from tokenmill.output import layout
from tokenmill.run.metrics import summary_counters
from tokenmill.sources.mapping import conversation_policy

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerSummary:
    url: str
    completed: int
    errors: int
    client_tokens: int  # output tokens of this run's completions (client side)
    client_tok_s: float  # client_tokens per second of the run
    decode_tok_s: float | None = None  # the server's own decode counter over the run (when scraped)
    gpus: int = 1


@dataclass(slots=True)
class Summary:
    """Numbers of one run (this invocation) plus the totals recorded in the output directory."""

    finished: bool
    output_dir: str
    model: str
    api: str
    total_rows: int | None
    completed_total: int
    failed_total: int
    skipped: int
    completed_this_run: int
    failed_this_run: int
    retries: int
    elapsed_s: float
    completions_per_s: float  # completed prompts per second of the run
    client_tokens: int  # output tokens of this run's completions (client side)
    client_tok_s: float  # client_tokens per second of the run
    avg_output_tokens: float
    servers: list[ServerSummary]
    decode_tok_s: float | None = None  # the fleet's decode tok/s from the servers' counters, over the run
    decode_tok_s_per_gpu: float | None = None
    gpus: int = 0
    usable_servers: int = 0
    eta_s: float | None = None
    binding: str | None = None  # the binding resource: of the verdicts shown at the end (binding_verdict), else
    # the one that bound longest during the run
    binding_by: str | None = None  # the verdict that names it (None: it comes from the longest during the run)
    bound_longest: str | None = None  # the resource that bound longest during the run, when it is another one
    verdicts: list[str] = field(default_factory=list)
    state: str | None = None  # "running" / "finished" / "stopped" / "interrupted": where the run stands
    answers: int = 0  # answers received this run (every turn of a conversation counts)
    truncated: int = 0  # of them, cut at max_tokens
    max_tokens: int | None = None
    rows_read: int = 0  # input rows read (this run), and those with several user turns
    multi_turn_rows: int = 0
    conversation_turns: str | None = None  # what the job does with them
    expected: str | None = None  # the decode rate as a share of the planner's expectation and of the roofline
    abandoned: int = 0  # requests given up on a read timeout while their server was overloaded
    abandoned_tokens: float = 0.0  # their estimated output tokens, decoded and thrown away
    outlived: int = 0  # of them, requests that timed out while their server ran them (nothing queued)
    repeatedly_abandoned: int = 0  # prompts abandoned retry.abandoned_report_after times or more
    read_timeouts: list[str] = field(default_factory=list)  # servers whose read timeout grew: "URL: 6 s"
    upload: str | None = None  # the upload backlog (shards waiting, the oldest, the store's error); None: none
    held: str | None = None  # why generation is paused
    time_scale: str | None = None  # time-scaled twins: the rates (the client's too) are on their clock
    counts: dict[str, float] = field(default_factory=dict)  # the metric table's run counters with a summary label

    @property
    def truncated_share(self) -> float | None:
        return self.truncated / self.answers if self.answers else None

    @classmethod
    def from_snapshot(
        cls, snap: Snapshot, *, output_dir: str, model: str, api: str, recorded: tuple[int, int], state: str
    ) -> Summary:
        """The summary of the run ``snap`` shows; ``recorded`` is (completed, failed) recorded in the output
        directory, all runs together; ``state`` says where the run stands (``finished`` for a complete one)."""
        elapsed = max(snap.elapsed_s, 1e-9)
        servers = _servers(snap)
        decoded = [s.decode_tok_s for s in servers if s.decode_tok_s is not None]
        gpus = sum(s.gpus for s in servers)
        fleet = sum(decoded) if decoded else None
        finished = state == "finished"
        now = binding_verdict(snap.verdicts)  # the one rule of every view (a verdict about the corpus binds nothing)
        return cls(
            finished=finished,
            output_dir=output_dir,
            model=model,
            api=api,
            total_rows=snap.total,
            completed_total=recorded[0],
            failed_total=recorded[1],
            skipped=snap.skipped,
            completed_this_run=snap.completed,
            failed_this_run=snap.failed,
            retries=snap.retries,
            elapsed_s=snap.elapsed_s,
            completions_per_s=snap.completed / elapsed,
            client_tokens=snap.client_tokens,
            client_tok_s=snap.client_tokens / elapsed,
            avg_output_tokens=snap.client_tokens / snap.completed if snap.completed else 0.0,
            servers=servers,
            decode_tok_s=fleet,
            decode_tok_s_per_gpu=fleet / gpus if fleet is not None and gpus else None,
            gpus=gpus,
            usable_servers=sum(1 for r in snap.servers if r.usable),
            eta_s=None if finished else snap.eta_s,
            binding=now.binds if now is not None else snap.binding,
            binding_by=now.title if now is not None else None,
            bound_longest=snap.binding if now is not None and snap.binding and snap.binding != now.binds else None,
            verdicts=[v.line() for v in snap.verdicts],
            state=state,
            answers=snap.answers,
            truncated=snap.truncated,
            max_tokens=snap.max_tokens,
            rows_read=snap.rows_read,
            multi_turn_rows=snap.multi_turn_rows,
            conversation_turns=snap.conversation_turns,
            expected=expected_text(snap, over_run=True) or None,
            time_scale=time_scale_text(snap) or None,
            abandoned=snap.abandoned,
            abandoned_tokens=snap.abandoned_tokens,
            outlived=snap.outlived,
            repeatedly_abandoned=snap.repeatedly_abandoned,
            read_timeouts=[f"{r.url}: {r.read_timeout_s:,.0f} s" for r in snap.servers if r.read_timeout_s],
            upload=upload_text(snap) or None,
            held=snap.held,
            counts={m.tick or "": snap.counts.get(m.tick or "", 0.0) for m in summary_counters()},
        )

    def _multi_turn(self) -> str:
        if not self.rows_read:
            return "-"
        counted = f"{self.multi_turn_rows:,} of {self.rows_read:,} rows"
        if not self.multi_turn_rows or self.conversation_turns is None:
            return counted
        return f"{counted}: {conversation_policy(self.conversation_turns)}"

    def _counted(self) -> list[tuple[str, str]]:
        """A row per run counter of the metric table that has a summary label (:data:`Summary.counts`)."""
        return [(m.summary or "", f"{self.counts.get(m.tick or '', 0.0):,.0f}") for m in summary_counters()]

    def _binding(self) -> str:
        if not self.binding:
            return "-"
        return f"{self.binding} ({self.binding_by or 'longest during the run'})"

    def _wasted(self) -> str:
        if not self.abandoned:
            return "-"
        share = ""
        if self.client_tokens:
            share = f", {self.abandoned_tokens / (self.client_tokens + self.abandoned_tokens) * 100:.1f}% of decoded"
        where = f"{self.abandoned - self.outlived:,} waited in a queue, {self.outlived:,} ran longer than the timeout"
        text = (
            f"{self.abandoned:,} requests ({where}), ~{self.abandoned_tokens:,.0f} output tokens wasted{share} "
            "(estimated: time spent x the server's per-request rate, at most max_tokens)"
        )
        if self.read_timeouts:
            text += f"; read timeout grown to {', '.join(self.read_timeouts)}"
        if self.repeatedly_abandoned:
            text += f"; {self.repeatedly_abandoned:,} prompts abandoned again and again (named in the log)"
        return text

    def markdown(self) -> str:
        state = self.state or ("finished" if self.finished else "stopped")
        if state == "stopped":
            state = "stopped (rerun the same command to resume)"
        fleet = "-" if self.decode_tok_s is None else f"{self.decode_tok_s:,.0f}"
        per_gpu = "-" if self.decode_tok_s_per_gpu is None else f"{self.decode_tok_s_per_gpu:,.0f}"
        timing = f"{duration(self.elapsed_s)}" + (
            f" (ETA {duration(self.eta_s)})" if self.eta_s is not None and not self.finished else ""
        )
        rows = [
            ("state", state),
            ("output", self.output_dir),
            ("model / api", f"{self.model} / {self.api}"),
            ("prompts (input rows)", "?" if self.total_rows is None else f"{self.total_rows:,}"),
            ("completed (all runs)", f"{self.completed_total:,}"),
            ("failed (all runs)", f"{self.failed_total:,}"),
            ("skipped bad rows", f"{self.skipped:,}"),
            ("completed this run", f"{self.completed_this_run:,}"),
            ("retries this run", f"{self.retries:,}"),
            *self._counted(),
            ("elapsed", timing),
            ("servers", f"{len(self.servers)} ({self.usable_servers} usable), {self.gpus or len(self.servers)} GPUs"),
            ("decode tok/s (servers, aggregate)", scaled(fleet, self.time_scale)),
            ("decode tok/s per GPU", scaled(per_gpu, self.time_scale)),
            ("decode rate vs the hardware", self.expected or "-"),
            ("completions/s (client)", scaled(f"{self.completions_per_s:,.2f}", self.time_scale)),
            ("output tok/s (client-effective)", scaled(f"{self.client_tok_s:,.0f}", self.time_scale)),
            ("avg output tokens", f"{self.avg_output_tokens:,.1f}"),
            ("answers cut at max_tokens", cut_text(self.truncated, self.answers, self.max_tokens)),
            ("abandoned on read timeouts", self._wasted()),
            ("rows with several user turns", self._multi_turn()),
            ("binding resource", self._binding()),
        ]
        if self.bound_longest:
            rows.append(("bound longest during the run by", self.bound_longest))
        if self.upload:
            rows.append(("upload backlog", self.upload))
        if self.held:
            rows.append(("generation paused", self.held))
        lines = ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
        lines += [
            "| server | completed | errors | output tokens | client tok/s | decode tok/s | GPUs |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {s.url} | {s.completed:,} | {s.errors:,} | {s.client_tokens:,} | {s.client_tok_s:,.0f} | "
            f"{'-' if s.decode_tok_s is None else f'{s.decode_tok_s:,.0f}'} | {s.gpus} |"
            for s in self.servers
        ]
        if self.verdicts:
            lines += ["", "doctor:", *(f"- {v}" for v in self.verdicts)]
        if self.failed_this_run:
            lines += [
                "",
                f"{self.failed_this_run} prompts failed this run: see failed.jsonl; "
                "`tokenmill retry-failed JOB.yaml` re-queues them.",
            ]
        return "\n".join(lines) + "\n"


def _servers(snap: Snapshot) -> list[ServerSummary]:
    """Each server's numbers over the run (its decode rate from its own counters, when it was scraped)."""
    elapsed = max(snap.elapsed_s, 1e-9)
    return [
        ServerSummary(
            r.url,
            r.completed,
            r.errors,
            r.client_tokens,
            r.client_tokens / elapsed,
            decode_tok_s=r.decoded_tokens / elapsed if r.healthy is not None else None,
            gpus=r.gpus,
        )
        for r in snap.servers
    ]


def write_summary(out: Path, summary: Summary) -> None:
    """Save ``summary.md`` and ``summary.json`` next to the shards (best effort: the data is already safe)."""
    try:
        (out / layout.SUMMARY_MD).write_text(summary.markdown())
        (out / layout.SUMMARY_JSON).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    except OSError as exc:
        log.warning("could not save the summary in %s: %s", out, exc)
