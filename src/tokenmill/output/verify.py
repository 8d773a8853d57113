"""``verify``: check an output directory end to end, without changing it.

Every sealed shard is read in full and checked against its manifest line (sha256, count, bytes, ids);
every line of every file must decode; a torn last line is reported; no id may appear twice across the
shards and ``failed.jsonl``. Given the input ids, every input id must be completed, failed or skipped
exactly once, and nothing else may appear. Memory grows with the number of ids (one set), not their text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.errors import OutputError
from tokenmill.output import layout, manifest, offload, rounds
from tokenmill.output.manifest import ManifestRead
from tokenmill.output.scan import Scan, scan
from tokenmill.records import Skip
from tokenmill.sources.samples import split_sample_id

LISTED_PER_KIND = 20  # problems listed per kind; the totals always count them all

# What each kind of problem means for the user, and what to do about it.
HINTS: dict[str, str] = {
    "missing-shard": "a shard listed in the manifest is gone: restore it, or delete its manifest line to redo it",
    "mismatch": "a sealed shard changed after it was sealed: restore it from the remote copy, or move it aside "
    "and delete its manifest line to redo its prompts",
    "unindexed": "a sealed shard has no manifest line (a crash right after sealing): rerun the job to index it",
    "manifest-line": "the manifest has an unreadable or repeated line: rerun the job to rewrite the manifest",
    "bad-line": "a line is not a valid record: move the file aside to redo what it holds",
    "torn": "a write was cut short (crash or full disk): rerun the job; it cuts the torn line and redoes it",
    "layout": "files only another program could have left: keep one open shard, move the others aside",
    "duplicate": "an id was recorded more than once (a second writer, or files copied in): keep one record",
    "missing": "input ids with no completion, failure or skip: rerun the job to generate them",
    "samples-missing": "input rows with fewer answers than samples asks for: rerun the job to generate the rest",
    "unexpected": "ids in the output that are not in this input: check that --input names the same job",
    "remote-missing": "a sealed shard is not at the remote prefix: rerun the same command to upload it",
    "remote-mismatch": "the remote object differs from the local shard: find out who wrote it; it is never "
    "overwritten, so move it away and rerun to upload the local one",
    "remote-unlisted": "uploaded but not yet in the remote manifest (a stop right after the upload): rerun",
    "remote-extra": "a shard object at the prefix that this output does not hold: check output.remote",
    "remote-manifest": "the remote manifest is missing, of another job, or disagrees with the local one",
    "remote-marker": "_SUCCESS disagrees with the local output: rerun the same command to rewrite it",
    "round": "a regeneration round's own files are damaged (see the problem): `tokenmill verify` the round's "
    "directory and follow its advice, or move the round aside to keep the earlier answers",
    "round-foreign": "a regeneration round answered an id this output never completed: move the round aside",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong, with where it was found."""

    kind: str
    where: str
    detail: str


@dataclass(slots=True)
class VerifyReport:
    """The outcome of :func:`verify`: ``ok`` only when no problem was found."""

    out: Path
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)  # at most LISTED_PER_KIND per kind
    totals: dict[str, int] = field(default_factory=dict)  # problems per kind, all counted
    notes: list[str] = field(default_factory=list)
    checked_input: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.totals

    def add(self, kind: str, where: str, detail: str) -> None:
        """Count a problem, and list it while its kind is under the listing cap."""
        self.totals[kind] = self.totals.get(kind, 0) + 1
        if self.totals[kind] <= LISTED_PER_KIND:
            self.problems.append(Problem(kind, where, detail))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``tokenmill verify --json``)."""
        return {
            "ok": self.ok,
            "out": str(self.out),
            "counts": self.counts,
            "problem_totals": self.totals,
            "problems": [{"kind": p.kind, "where": p.where, "detail": p.detail} for p in self.problems],
            "notes": self.notes,
            "checked_input": self.checked_input,
        }

    def render(self) -> str:
        """A human summary: counts, verdict, problems grouped by kind, notes."""
        lines = [f"output {self.out}", *self._count_lines()]
        if self.ok:
            scope = "; every input id is accounted for" if self.checked_input else ""
            lines.append(f"OK: every sealed shard matches the manifest, no duplicate ids{scope}")
        else:
            total = sum(self.totals.values())
            lines.append(f"NOT OK: {total:,} problem{'s' if total != 1 else ''}")
            for kind, count in self.totals.items():
                lines.append(f"  {kind} ({count:,}): {HINTS.get(kind, '')}")
                listed = [p for p in self.problems if p.kind == kind]
                lines.extend(f"    {p.where}: {p.detail}" for p in listed)
                if count > len(listed):
                    lines.append(f"    ... and {count - len(listed):,} more")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def _count_lines(self) -> list[str]:
        c = self.counts
        lines = [
            f"  sealed shards  {c['sealed_shards']:,} ({c['sealed_records']:,} completions, "
            f"{c['sealed_bytes']:,} bytes)",
            f"  open shard     {c['open_records']:,} completions",
            f"  failed         {c['failed']:,}",
            f"  skipped        {c['skipped']:,}",
        ]
        if self.checked_input:
            lines.append(
                f"  input          {c['input_ids']:,} ids, {c['input_skipped']:,} rows skipped: "
                f"{c['missing']:,} missing, {c['unexpected']:,} unexpected"
            )
            if "input_rows" in c:
                lines.append(
                    f"  samples        {c['input_rows']:,} rows x {c['samples']}: {c['rows_short']:,} with fewer "
                    f"than {c['samples']} answers"
                )
        return lines


def verify(out: Path, input_ids: Iterable[str | Skip] | None = None, samples: int = 1) -> VerifyReport:
    """Check the output directory ``out``; with ``input_ids`` (ids, or Skips for rows the input skipped)
    also check that each input id is recorded exactly once and nothing else is (with ``samples`` N > 1, the
    ids of each row's N samples, and which rows have fewer than N answers)."""
    out = Path(out)
    if not out.is_dir():
        raise OutputError(f"{out} is not an output directory (it does not exist or is a file)")
    report = VerifyReport(out=out)
    checker = _Checker(out, report)
    checker.run()
    _check_rounds(out, report, checker.recorded - checker.failed_ids)
    if input_ids is not None:
        checker.match_input(input_ids, samples)
    return report


def _check_rounds(out: Path, report: VerifyReport, completed: set[str]) -> None:
    """Each regeneration round is a sound output of its own, and answers only ids ``out`` completed (its answers
    are the live ones; the records they replace stay in ``out``, set aside)."""
    found = rounds.rounds(out)
    if not found:
        return
    for rnd in found:
        if rnd.out.is_dir():
            inner = verify(rnd.out)
            for problem in inner.problems:
                report.add("round", f"{rnd.name}/{problem.where}", f"{problem.kind}: {problem.detail}")
        answered, total = rnd.progress()
        if answered < total:
            report.notes.append(
                f"{rnd.name} is unfinished: {answered:,} of {total:,} prompts answered again (the rest keep their "
                "earlier answers); rerun `tokenmill regenerate JOB` to finish it"
            )
    latest = rounds.superseding(out, found)
    for rid in sorted(set(latest) - completed):
        report.add("round-foreign", f"{rounds.DIR}/round-{latest[rid]:03d}", f"id {rid!r}")
    report.counts["regenerated"] = len(latest)
    report.notes.append(
        f"{len(latest):,} prompts have a newer answer from {len(found)} regeneration round(s) in {rounds.DIR}/; "
        "the records they replace stay in the shards, set aside"
    )


class _Checker:
    def __init__(self, out: Path, report: VerifyReport) -> None:
        self.out = out
        self.report = report
        self.recorded: set[str] = set()  # completed and failed ids
        self.failed_ids: set[str] = set()
        self.skipped_ids: set[str] = set()
        self.skip_sources: set[str] = set()  # over every writer's skipped file
        self.names = layout.Names()
        self.counts = report.counts
        self.counts.update(
            sealed_shards=0, sealed_records=0, sealed_bytes=0, open_records=0, failed=0, skipped=0, duplicates=0
        )

    def run(self) -> None:
        listing = layout.list_dir(self.out)
        for part in sorted(listing.partitions):  # the writers of a partitioned run, then the default one
            self.names = layout.Names(part)
            self._run_one(layout.list_dir(self.out, part))
        self.names = layout.Names()
        self._run_one(listing)
        if listing.archived_failed:
            self.report.notes.append(
                f"{len(listing.archived_failed)} failed.retry-N.jsonl file(s) hold failures already retried; "
                "they are history and not checked"
            )
        self.counts["skipped"] = len(self.skip_sources)

    def _run_one(self, listing: layout.Listing) -> None:
        """Check the files of one writer (see :class:`~tokenmill.output.layout.Names`)."""
        read = manifest.read(self.out / self.names.manifest)
        self._check_manifest(read, listing)
        for index in sorted(listing.sealed):
            name, _ = listing.sealed[index]
            self._check_sealed(name, read)
        self._check_open(listing)
        self._check_failed()
        self._check_skipped()
        for name in listing.leftovers:
            self.report.notes.append(f"{name} is left from an interrupted rewrite; the next run removes it")

    def _check_manifest(self, read: ManifestRead, listing: layout.Listing) -> None:
        where = self.names.manifest
        if not read.exists and listing.sealed:
            self.report.notes.append(f"{where} is missing; the next run rebuilds it from the shards")
        for line, reason in read.bad:
            self.report.add("manifest-line", where, f"line {line}: {reason}")
        for name in read.duplicates:
            self.report.add("manifest-line", where, f"{name} is listed more than once")
        if read.tail:
            self.report.add("torn", where, f"torn last line ({read.tail} bytes)")
        on_disk = {name for name, _ in listing.sealed.values()}
        offloaded = offload.of_writer(offload.read(self.out), self.names.partition) - on_disk
        for name in sorted(offloaded & set(read.entries)):
            self.counts["offloaded_shards"] = self.counts.get("offloaded_shards", 0) + 1
            self._record(read.entries[name].ids, name)
        if offloaded:
            self.report.notes.append(
                f"{len(offloaded)} sealed shard(s) were deleted here after a verified upload; "
                "check the remote copies with --remote"
            )
        for name in sorted(set(read.entries) - on_disk - offloaded):
            entry = read.entries[name]
            self.report.add("missing-shard", name, f"listed in the manifest ({entry.count} records) but not on disk")

    def _check_sealed(self, name: str, read: ManifestRead) -> None:
        result = scan(self.out / name, "ok")
        self._damage(result, name)
        self.counts["sealed_shards"] += 1
        self.counts["sealed_records"] += result.records
        self.counts["sealed_bytes"] += result.size
        entry = read.entries.get(name)
        if entry is None:
            self.report.add("unindexed", name, f"{result.records} records, no manifest line")
        else:
            differ = []
            if entry.sha256 != result.file_sha256:
                differ.append("sha256")
            if entry.count != result.records:
                differ.append(f"count ({result.records} on disk, {entry.count} in the manifest)")
            if entry.bytes != result.size:
                differ.append(f"bytes ({result.size} on disk, {entry.bytes} in the manifest)")
            if entry.ids != result.ids:
                differ.append("ids")
            if differ:
                self.report.add("mismatch", name, "differs from its manifest line in " + ", ".join(differ))
        self._record(result.ids, name)

    def _check_open(self, listing: layout.Listing) -> None:
        if len(listing.open) > 1:
            self.report.add("layout", str(self.out), "several open shards: " + ", ".join(sorted(listing.open.values())))
        for index, name in sorted(listing.open.items()):
            if index in listing.sealed:
                self.report.add("layout", name, f"{listing.sealed[index][0]} exists too")
            result = scan(self.out / name, "ok")
            self._damage(result, name)
            self.counts["open_records"] += result.records
            self._record(result.ids, name)
            self.report.notes.append(
                f"{name} is open with {result.records:,} completions: the run has not finished, or stopped "
                "before sealing it (the next run continues it)"
            )

    def _check_failed(self) -> None:
        result = scan(self.out / self.names.failed, "failed")
        self._damage(result, self.names.failed)
        self.counts["failed"] += result.records
        self.failed_ids.update(result.ids)
        self._record(result.ids, self.names.failed)

    def _check_skipped(self) -> None:
        result = scan(self.out / self.names.skipped, "skipped")
        self._damage(result, self.names.skipped)
        sources = Counter(result.sources)
        self.skip_sources.update(sources)
        self.skipped_ids.update(result.ids)
        repeats = result.records - len(sources)
        if repeats:
            self.report.notes.append(f"{self.names.skipped} repeats {repeats} row(s); the next run drops the repeats")

    def _damage(self, result: Scan, where: str) -> None:
        for line, reason in result.bad:
            self.report.add("bad-line", where, f"line {line}: {reason}")
        for _ in range(result.bad_total - len(result.bad)):
            self.report.add("bad-line", where, "(not listed)")
        if result.tail:
            self.report.add("torn", where, f"torn last line ({result.tail} bytes)")

    def _record(self, ids: list[str], where: str) -> None:
        recorded = self.recorded
        for rid in ids:
            if rid in recorded:
                self.counts["duplicates"] += 1
                self.report.add("duplicate", where, f"id {rid!r} was already recorded")
            else:
                recorded.add(rid)

    def match_input(self, items: Iterable[str | Skip], samples: int = 1) -> None:
        """Tick off each input id; what is left over afterwards was not in the input."""
        match_input(self.report, self.recorded, self.skipped_ids, items, samples)


def match_input(
    report: VerifyReport, recorded: set[str], skipped_ids: set[str], items: Iterable[str | Skip], samples: int = 1
) -> None:
    """Tick each input id off ``recorded`` (the completed and failed ids; consumed) or ``skipped_ids``; report what
    is missing, and what is left over afterwards (not in the input). With ``samples`` N > 1 the ids are a row's
    samples, N in a row (:mod:`tokenmill.sources.samples`): each row with fewer than N answers is reported too."""
    report.checked_input = True
    counts = report.counts
    counts.update(input_ids=0, input_skipped=0, missing=0, unexpected=0, input_repeats=0)
    rows = _SampleCount(report, samples) if samples > 1 else None
    matched: set[str] = set()
    skipped_now: set[str] = set()
    for item in items:
        if isinstance(item, Skip):
            counts["input_skipped"] += 1
            if item.id is not None:
                skipped_now.add(item.id)
            continue
        counts["input_ids"] += 1
        if item in recorded:
            recorded.discard(item)
            matched.add(item)
        elif item in matched:
            counts["input_repeats"] += 1
        elif item not in skipped_ids:
            counts["missing"] += 1
            report.add("missing", "input", f"id {item!r}")
            if rows is not None:
                rows.missing(item)
        if rows is not None:
            rows.see(item)
    if rows is not None:
        rows.close()
    for rid in sorted(recorded):
        counts["unexpected"] += 1
        why = " (the input now skips that row)" if rid in skipped_now else ""
        report.add("unexpected", "output", f"id {rid!r}{why}")
    if counts["input_repeats"]:
        report.notes.append(f"the input repeats {counts['input_repeats']:,} id(s); each is generated once")


class _SampleCount:
    """The rows of a job with ``samples`` N, counted as their N ids go by (consecutive, as the input yields them):
    how many rows there are, and each one with fewer than N answers, with the samples it lacks."""

    def __init__(self, report: VerifyReport, samples: int) -> None:
        self.report, self.samples = report, samples
        self.row: str | None = None
        self.lacking: list[int] = []
        report.counts.update(input_rows=0, rows_short=0, samples=samples)

    def see(self, item: str) -> None:
        primary = _primary(item)
        if primary != self.row:
            self.close()
            self.row = primary
            self.report.counts["input_rows"] += 1

    def missing(self, item: str) -> None:
        self.see(item)
        parts = split_sample_id(item)
        self.lacking.append(parts[1] if parts is not None else -1)

    def close(self) -> None:
        if self.row is not None and self.lacking:
            self.report.counts["rows_short"] += 1
            have = self.samples - len(self.lacking)
            which = ", ".join(str(k) for k in self.lacking)
            self.report.add(
                "samples-missing", "input", f"id {self.row!r}: {have} of {self.samples} answers (missing: {which})"
            )
        self.lacking = []


def _primary(item: str) -> str:
    parts = split_sample_id(item)
    return parts[0] if parts is not None else item
