"""Skipped rows judged: too many stop the run (``input.max_skip_share``), and a run that completed nothing fails.

Under ``on_bad_row: skip`` a bad row is recorded in ``skipped.jsonl`` and the run goes on; a job whose rows do not
match it (a wrong ``input.id_field`` or mapping) would then skip every row and "finish" with nothing in it.
:class:`SkipGuard` sees every row the feed reads, in input order (rows already done count as read, so a resumed
run near its end is judged like the first one): once more than ``input.skips_allowed`` rows were skipped, more than
``input.max_skip_share`` of the rows read is too many, and :class:`TooManySkips` stops the run, naming the first
skipped rows (file:line and why). Whatever the share, :func:`nothing_completed` refuses to call a run finished
when the job holds no completion while rows were skipped or failed: no ``_SUCCESS``, exit 2.
"""

from __future__ import annotations

from pathlib import Path

from tokenmill.config import InputSpec
from tokenmill.errors import InputError
from tokenmill.records import Skip

EXAMPLES = 3  # skipped rows named in the messages
FIX = (
    "check input.id_field, input.mapping and the *_field names against a row; a fixed input.id_field makes other "
    "ids (another input): run it in a new output.dir (and output.remote prefix), other fixes rerun here with "
    "--allow-changed-job"
)


class TooManySkips(InputError):
    """More rows were skipped than ``input.max_skip_share`` allows."""


class SkipGuard:
    """Counts the rows read and skipped (called from the feed's thread, in input order)."""

    def __init__(self, spec: InputSpec, skipped_file: Path) -> None:
        self.share = spec.max_skip_share
        self.allowed = spec.skips_allowed
        self.skipped_file = skipped_file
        self.rows = 0
        self.skipped = 0
        self.first: list[Skip] = []

    def see(self, row: object) -> TooManySkips | None:
        """Count one row read; the error that stops the run when this row makes the skips too many."""
        self.rows += 1
        if not isinstance(row, Skip):
            return None
        self.skipped += 1
        if len(self.first) < EXAMPLES:
            self.first.append(row)
        if self.share >= 1.0 or self.skipped <= self.allowed or self.skipped <= self.share * self.rows:
            return None
        return TooManySkips(
            f"stopped: {self.skipped:,} of the {self.rows:,} input rows read were skipped as bad rows, more than "
            f"input.max_skip_share ({self.share:.0%} of the rows read, judged once more than {self.allowed} are "
            f"skipped); {self.examples()}. The input does not look like what the job says: {FIX}. If this many bad "
            "rows are expected, raise input.max_skip_share"
        )

    def examples(self) -> str:
        """The first skipped rows with file:line and why, and where the rest are."""
        shown = "; ".join(f"{s.source}: {s.reason}" for s in self.first)
        return f"the first: {shown} (every one is in {self.skipped_file})" if shown else "none this run"


def nothing_completed(guard: SkipGuard, completed: int, failed: int, failed_file: Path) -> InputError | None:
    """The error of a run that reached the end of its input with no completion in the job (all runs, every
    writer) while rows were skipped or prompts failed; None otherwise (an empty share of a split run is fine)."""
    if completed or not (guard.skipped or failed):
        return None
    parts = []
    if guard.skipped:
        read = f"{guard.skipped:,} of the {guard.rows:,} input rows read"
        parts.append(f"{read} were skipped as bad rows ({guard.examples()})")
    if failed:
        parts.append(
            f"{failed:,} prompt(s) failed (see {failed_file}; `tokenmill retry-failed JOB.yaml` re-queues them)"
        )
    return InputError(
        f"the run completed nothing: {'; '.join(parts)}. It is not marked finished (no _SUCCESS). For the skips: {FIX}"
    )
