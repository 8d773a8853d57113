"""The summary table: printed and saved as ``OUT/summary.md`` (and ``summary.json``) at the end of a run,
and rebuilt at any time from the event log by ``tokenmill status`` (also while a run is in progress).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tokenmill.fmt import duration

if TYPE_CHECKING:
    from tokenmill.config import JobSpec
    from tokenmill.monitor.snapshot import Snapshot
    from tokenmill.run.dispatch import Dispatcher


@dataclass(slots=True)
class ServerSummary:
    url: str
    completed: int
    errors: int
    output_tokens: int
    output_tok_s: float  # client-side: output tokens of this run's completions per second
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
    completions_per_s: float
    output_tokens: int
    output_tok_s: float  # client-effective: output tokens received per second
    avg_output_tokens: float
    servers: list[ServerSummary]
    server_decode_tok_s: float | None = None  # the fleet's decode tok/s from the servers' counters
    decode_tok_s_per_gpu: float | None = None
    gpus: int = 0
    usable_servers: int = 0
    eta_s: float | None = None
    binding: str | None = None  # the doctor's binding resource when the run ended
    verdicts: list[str] = field(default_factory=list)
    state: str | None = None  # "running" / "finished" / "stopped" (status of a run in progress)

    @classmethod
    def build(
        cls, job: JobSpec, snap: Snapshot, dispatcher: Dispatcher, before: tuple[int, int], finished: bool
    ) -> Summary:
        """``before`` is (completed, failed) recorded in the output when this run started."""
        st = dispatcher.stats
        elapsed = max(snap.elapsed_s, 1e-9)
        rows = {r.url: r for r in snap.servers}
        servers = []
        for s in dispatcher.servers:
            row = rows.get(s.url)
            scraped = row is not None and row.healthy is not None
            servers.append(
                ServerSummary(
                    s.url,
                    s.completed,
                    s.errors,
                    s.completion_tokens,
                    s.completion_tokens / elapsed,
                    decode_tok_s=row.output_tokens / elapsed if scraped and row else None,
                    gpus=row.gpus if row else 1,
                )
            )
        decoded = [s.decode_tok_s for s in servers if s.decode_tok_s is not None]
        gpus = sum(s.gpus for s in servers)
        fleet = sum(decoded) if decoded else None
        return cls(
            finished=finished,
            output_dir=job.output.dir,
            model=job.model,
            api=job.api,
            total_rows=snap.total,
            completed_total=before[0] + st.completed,
            failed_total=before[1] + st.failed,
            skipped=snap.skipped,
            completed_this_run=st.completed,
            failed_this_run=st.failed,
            retries=st.retries,
            elapsed_s=snap.elapsed_s,
            completions_per_s=st.completed / elapsed,
            output_tokens=st.completion_tokens,
            output_tok_s=st.completion_tokens / elapsed,
            avg_output_tokens=st.completion_tokens / st.completed if st.completed else 0.0,
            servers=servers,
            server_decode_tok_s=fleet,
            decode_tok_s_per_gpu=fleet / gpus if fleet is not None and gpus else None,
            gpus=gpus,
            usable_servers=sum(1 for s in dispatcher.servers if s.usable),
            eta_s=None if finished else snap.eta_s,
            binding=snap.binding or (snap.verdicts[0].binds if snap.verdicts else None),
            verdicts=[v.line() for v in snap.verdicts],
            state="finished" if finished else "stopped",
        )

    @classmethod
    def from_events(
        cls,
        job: dict[str, Any],
        start: dict[str, Any],
        tick: dict[str, Any],
        state: str,
        recorded: tuple[int, int],
    ) -> Summary:
        """A summary from the event log's last ``tick`` (``tokenmill status``); ``recorded`` is (completed,
        failed) counted in the output directory now, all runs together."""
        c = tick.get("client", {})
        rows = tick.get("servers", [])
        elapsed = max(float(tick.get("elapsed") or 0.0), 1e-9)
        completed = int(c.get("completed") or 0)
        tokens = int(c.get("completion_tokens") or 0)
        servers = [
            ServerSummary(
                r["url"],
                int(r.get("completed") or 0),
                int(r.get("errors") or 0),
                0,
                float(r.get("client_tok_s") or 0.0),
                decode_tok_s=(r["output_tokens"] / elapsed) if r.get("healthy") is not None else None,
                gpus=int(r.get("gpus") or 1),
            )
            for r in rows
        ]
        decoded = [s.decode_tok_s for s in servers if s.decode_tok_s is not None]
        gpus = sum(s.gpus for s in servers)
        fleet = sum(decoded) if decoded else None
        failed = int(c.get("failed") or 0)
        spec = job.get("spec", {})
        return cls(
            finished=state == "finished",
            output_dir=str(start.get("output") or spec.get("output", {}).get("dir", "")),
            model=str(start.get("model") or spec.get("model", "?")),
            api=str(start.get("api") or spec.get("api", "?")),
            total_rows=c.get("total"),
            completed_total=recorded[0],
            failed_total=recorded[1],
            skipped=int(c.get("skipped") or 0),
            completed_this_run=completed,
            failed_this_run=failed,
            retries=int(c.get("retries") or 0),
            elapsed_s=elapsed,
            completions_per_s=completed / elapsed,
            output_tokens=tokens,
            output_tok_s=tokens / elapsed,
            avg_output_tokens=tokens / completed if completed else 0.0,
            servers=servers,
            server_decode_tok_s=fleet,
            decode_tok_s_per_gpu=fleet / gpus if fleet is not None and gpus else None,
            gpus=gpus,
            usable_servers=sum(1 for r in rows if r.get("usable")),
            eta_s=c.get("eta_s") if state == "running" else None,
            binding=tick.get("binding"),
            verdicts=list(tick.get("verdicts") or []),
            state=state,
        )

    def markdown(self) -> str:
        state = self.state or ("finished" if self.finished else "stopped")
        if state == "stopped":
            state = "stopped (rerun the same command to resume)"
        fleet = "-" if self.server_decode_tok_s is None else f"{self.server_decode_tok_s:,.0f}"
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
            ("elapsed", timing),
            ("servers", f"{len(self.servers)} ({self.usable_servers} usable), {self.gpus or len(self.servers)} GPUs"),
            ("decode tok/s (servers, aggregate)", fleet),
            ("decode tok/s per GPU", per_gpu),
            ("completions/s (client)", f"{self.completions_per_s:,.2f}"),
            ("output tok/s (client-effective)", f"{self.output_tok_s:,.0f}"),
            ("avg output tokens", f"{self.avg_output_tokens:,.1f}"),
            ("binding resource", self.binding or (self.verdicts[0] if self.verdicts else "-")),
        ]
        lines = ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
        lines += [
            "| server | completed | errors | output tokens | client tok/s | decode tok/s | GPUs |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {s.url} | {s.completed:,} | {s.errors:,} | {s.output_tokens:,} | {s.output_tok_s:,.0f} | "
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


def write_summary(out: Path, summary: Summary) -> None:
    """Save ``summary.md`` and ``summary.json`` next to the shards (best effort: the data is already safe)."""
    try:
        (out / "summary.md").write_text(summary.markdown())
        (out / "summary.json").write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    except OSError as exc:
        logging.getLogger("tokenmill.run").warning("could not save the summary in %s: %s", out, exc)
