"""The end-of-run summary: a Markdown table printed and saved as ``OUT/summary.md`` (and ``summary.json``)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from tokenmill.progress import fmt_duration

if TYPE_CHECKING:
    from tokenmill.config import JobSpec
    from tokenmill.dispatch import Dispatcher
    from tokenmill.progress import Snapshot


@dataclass(slots=True)
class ServerSummary:
    url: str
    completed: int
    errors: int
    output_tokens: int
    output_tok_s: float


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
    output_tok_s: float
    avg_output_tokens: float
    servers: list[ServerSummary]

    @classmethod
    def build(
        cls, job: JobSpec, snap: Snapshot, dispatcher: Dispatcher, before: tuple[int, int], finished: bool
    ) -> Summary:
        """``before`` is (completed, failed) recorded in the output when this run started."""
        st = dispatcher.stats
        elapsed = max(snap.elapsed_s, 1e-9)
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
            servers=[
                ServerSummary(s.url, s.completed, s.errors, s.completion_tokens, s.completion_tokens / elapsed)
                for s in dispatcher.servers
            ],
        )

    def markdown(self) -> str:
        state = "finished" if self.finished else "stopped (rerun the same command to resume)"
        rows = [
            ("state", state),
            ("output", self.output_dir),
            ("model / api", f"{self.model} / {self.api}"),
            ("input rows", "?" if self.total_rows is None else f"{self.total_rows:,}"),
            ("completed (all runs)", f"{self.completed_total:,}"),
            ("failed (all runs)", f"{self.failed_total:,}"),
            ("skipped bad rows", f"{self.skipped:,}"),
            ("completed this run", f"{self.completed_this_run:,}"),
            ("retries this run", f"{self.retries:,}"),
            ("elapsed", fmt_duration(self.elapsed_s)),
            ("completions/s", f"{self.completions_per_s:,.2f}"),
            ("output tok/s (all servers)", f"{self.output_tok_s:,.0f}"),
            ("avg output tokens", f"{self.avg_output_tokens:,.1f}"),
            ("servers", str(len(self.servers))),
        ]
        lines = ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
        lines += ["| server | completed | errors | output tokens | output tok/s |", "|---|---:|---:|---:|---:|"]
        lines += [
            f"| {s.url} | {s.completed:,} | {s.errors:,} | {s.output_tokens:,} | {s.output_tok_s:,.0f} |"
            for s in self.servers
        ]
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
