"""Training-ready data from an output directory: the conversation with the generated assistant turn(s).

One record per completed prompt is written in one of the formats of :data:`tokenmill.export.formats.FORMATS`
(failed prompts are never exported); :mod:`tokenmill.export.rows` builds each record's row, the format's shape
or writer turns it into what is written: JSON lines, token rows (:mod:`tokenmill.export.tokens`, on every core
with :mod:`tokenmill.export.parallel`), one parquet file or a Hugging Face dataset.

``reasoning_content`` is kept on assistant turns (``reasoning="keep"``) or dropped. Every row carries
``thinking``, the thinking mode the answer was generated with (true, false, or null: none was sent). Token ids
are written when the run captured them (``save_token_ids``): ``prompt_token_ids``/``completion_token_ids`` for one turn,
``turn_token_ids`` (a list per turn) for multi-turn regeneration. Filters drop rows by quality signal
(``drop``: truncated, empty, no_answer, repetition, think_markers, degenerate, duplicate — the later copies of an
answer given to several prompts) or outside a completion-token range; empty completions are never exported. The
counts say what was kept and why the rest was dropped.

A job with ``samples: N`` exports one row per answer (its id ``{id}_gen{k}``, the input row's id in
``primary_id``, ``sample`` k), or with ``samples="grouped"`` one row per prompt, ``{"id", "answers": [...]}``
(:mod:`tokenmill.export.grouped`; the formats the table marks groupable).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tokenmill.errors import ConfigError, OutputError
from tokenmill.export.formats import Format, format_of, grouped_formats
from tokenmill.export.grouped import SampleGroups
from tokenmill.export.parallel import TokenJob, token_lines
from tokenmill.export.rows import Row, record_row
from tokenmill.export.tokens import TokenCounts, TokenOptions, job_setting
from tokenmill.fsio import atomic_file
from tokenmill.quality.records import DuplicateFinder, answer_digest, record_quality, selected
from tokenmill.quality.registry import REASONS
from tokenmill.records.read import CompletionRecord
from tokenmill.storage.corpus import Corpus, open_corpus

PARQUET_BATCH = 1000
GROUP_BUFFER = 8192  # export --samples grouped: at most this many answers held (export.grouped.SampleGroups)
DROP_REASONS = REASONS  # why a record was left out, per --drop selector (the quality signals' table)


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """What to write and what to leave out."""

    format: str  # a name of tokenmill.export.formats.FORMATS
    reasoning: Literal["keep", "drop"] = "keep"
    drop: tuple[str, ...] = ()  # quality selectors (tokenmill.quality.corpus.SELECTORS)
    min_completion_tokens: int | None = None
    max_completion_tokens: int | None = None
    token_ids: bool = True
    allow_empty: bool = False  # writing no row at all is an error unless asked for
    samples: Literal["answers", "grouped"] = "answers"  # samples: N — one row per answer, or one per prompt
    group_buffer: int = GROUP_BUFFER  # --samples grouped: answers held at most while their prompt's others come
    tokens: TokenOptions = field(default_factory=TokenOptions)  # format tokens: tokenizer, per_turn, max_length
    keep_fields: tuple[str, ...] | Literal["all"] = ()  # the input's own columns (record field ``fields``) to carry
    workers: int = 1  # format tokens: processes building the rows (the CLI's default: the machine's cores)
    strict: bool = False  # format tokens: a tokenizer that disagrees with the servers' counts fails the export


@dataclass(slots=True)
class ExportCounts:
    """What the job completed, what was written, and what was left out and why (also written as JSON beside the
    export)."""

    source: str = ""
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    completed: int = 0  # live records read: one per completed prompt
    failed: int = 0  # prompts recorded as failed: never exported
    regenerated: int = 0  # live records that are a regeneration round's answer
    read_from: dict[str, int] = field(default_factory=dict)  # the job's own records by where they lived
    remote_note: str | None = None
    groups: int | None = None  # --samples grouped: rows written, one per prompt (None: one row per answer)
    incomplete_groups: int = 0  # of them, with fewer answers than samples (failed, left out, or held too long)
    tokens: TokenCounts | None = None  # format tokens: rows, where their ids came from, what max_length cut

    def render(self) -> str:
        where = ", ".join(f"{n:,} {kind}" for kind, n in sorted(self.read_from.items()) if n)
        lines = [
            f"wrote {self.kept:,} of {self.completed:,} completed records" + (f" (read: {where})" if where else "")
        ]
        if self.regenerated:
            lines.append(f"  {self.regenerated:,} of them answered again by a regeneration round (the live answer)")
        lines += [f"left out {n:,}: {reason}" for reason, n in sorted(self.dropped.items())]
        if self.groups is not None:
            lines.append(
                f"  grouped into {self.groups:,} rows, one per prompt; {self.incomplete_groups:,} with fewer answers "
                "than samples (an answer failed, was left out, or came after its group was written)"
            )
        if self.failed:
            lines.append(f"not completed {self.failed:,}: failed prompts are never exported (see failed.jsonl)")
        if self.remote_note:
            lines.append(f"note: {self.remote_note}; read the local directory only")
        if self.tokens is not None:
            lines.append(self.tokens.render())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "completed": self.completed,
            "written": self.kept,
            "left_out": dict(sorted(self.dropped.items())),
            "failed": self.failed,
            "regenerated": self.regenerated,
            "read_from": dict(sorted(self.read_from.items())),
            "remote_note": self.remote_note,
            **({"tokens": self.tokens.as_dict()} if self.tokens is not None else {}),
            **({"groups": self.groups, "incomplete_groups": self.incomplete_groups} if self.groups is not None else {}),
        }


def drop_reason(rec: CompletionRecord, opts: ExportOptions, duplicates: DuplicateFinder | None = None) -> str | None:
    """Why a record is left out under ``opts``, or None to keep it (``duplicates`` remembers the answers kept)."""
    if any(not a.text.strip() for a in rec.answers):
        return "empty completion"
    if opts.drop:
        quality = record_quality(rec)
        repeat = duplicates is not None and "duplicate" in opts.drop and _repeats(rec, duplicates)
        chosen = selected(quality["flags"], repeat, opts.drop)
        if chosen is not None:
            return DROP_REASONS.get(chosen, chosen)
    tokens = rec.completion_tokens
    low, high = opts.min_completion_tokens, opts.max_completion_tokens
    if low is not None and (tokens is None or tokens < low):
        return f"fewer than {low} completion tokens"
    if high is not None and (tokens is None or tokens > high):
        return f"more than {high} completion tokens"
    return None


def _repeats(rec: CompletionRecord, duplicates: DuplicateFinder) -> bool:
    return duplicates.seen(rec.key, answer_digest(rec)) is not None


def to_row(rec: dict[str, Any], opts: ExportOptions, fmt: Format | None = None) -> Row:
    """One exported row of ``rec`` in ``opts.format`` (its format's shape of the record's row)."""
    fmt = fmt or format_of(opts.format)
    assert fmt.shape is not None, f"{fmt.name} rows are built by its writer"
    return fmt.shape(record_row(rec, opts.reasoning == "keep", opts.token_ids, opts.keep_fields))


def _kept(
    corpus: Corpus,
    opts: ExportOptions,
    counts: ExportCounts,
    left_out: Callable[[CompletionRecord], None] | None = None,
) -> Iterator[tuple[CompletionRecord, dict[str, Any]]]:
    """The kept live records, each typed and in its JSON form as read (:meth:`CompletionRecord.read_json`)."""
    duplicates = DuplicateFinder()
    for live in corpus.iter_live():
        counts.completed += 1
        if live.round is not None:
            counts.regenerated += 1
        reason = drop_reason(live, opts, duplicates)
        if reason is not None:
            counts.dropped[reason] += 1
            if left_out is not None:
                left_out(live)
            continue
        counts.kept += 1
        yield live, live.read_json()
    counts.read_from = {("local" if k == "local" else f"from {corpus.remote}"): n for k, n in corpus.read.items()}


def _lines(corpus: Corpus, opts: ExportOptions, counts: ExportCounts, fmt: Format) -> Iterator[bytes]:
    """The exported JSON lines: one per kept record (its format's shape), one per prompt with ``--samples
    grouped``, or the token rows."""
    if fmt.writer == "tokens":
        yield from _token_lines(corpus, opts, counts)
        return
    rows = _grouped(corpus, opts, counts, fmt) if opts.samples == "grouped" else _shaped(corpus, opts, counts, fmt)
    for row in rows:
        yield orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)


def _token_lines(corpus: Corpus, opts: ExportOptions, counts: ExportCounts) -> Iterator[bytes]:
    """``--format tokens``: each kept record's token rows (export.tokens, on ``opts.workers`` processes); a record
    that yields none is left out with its reason."""
    local = corpus.local  # the job's tokenizer and api, as its job.json records them
    job = TokenJob(
        opts.tokens,
        opts.keep_fields,
        job_setting(local, "tokenizer") if local else None,
        job_setting(local, "api") if local else None,
    )
    counts.tokens = TokenCounts()

    def left_out(why: str) -> None:
        counts.kept -= 1
        counts.dropped[why] += 1

    kept = (rec for _, rec in _kept(corpus, opts, counts))
    yield from token_lines(kept, job, opts.workers, counts.tokens, left_out, corpus.completed)


def _shaped(corpus: Corpus, opts: ExportOptions, counts: ExportCounts, fmt: Format) -> Iterator[Row]:
    for _, rec in _kept(corpus, opts, counts):
        yield to_row(rec, opts, fmt)


def _grouped(corpus: Corpus, opts: ExportOptions, counts: ExportCounts, fmt: Format) -> Iterator[Row]:
    """``--samples grouped``: one row per prompt, its answers' rows in ``answers`` (export.grouped)."""
    groups = SampleGroups(opts.group_buffer)
    for live, rec in _kept(corpus, opts, counts, groups.left_out):
        groups.add(live, to_row(rec, opts, fmt))
        yield from groups.take()
    groups.finish()
    yield from groups.take()
    counts.groups, counts.incomplete_groups = groups.written, groups.incomplete


def counts_path(dest: Path) -> Path:
    """Where the counts of an export to ``dest`` are written (beside it)."""
    return dest.with_name(dest.name + ".counts.json")


def export(target: str | Path, dest: Path, opts: ExportOptions) -> ExportCounts:
    """Write the live completions of ``target`` (an output directory or a remote prefix) to ``dest`` in
    ``opts.format``; returns what the job completed, what was written and what was left out, also written to
    :func:`counts_path`. A completed record that cannot be read, an export of nothing (unless
    ``opts.allow_empty``), or with ``opts.strict`` a tokenizer that disagrees with the servers' token counts, is
    an :class:`OutputError` (:class:`ConfigError`) and leaves ``dest`` as it was."""
    fmt = format_of(opts.format)
    if opts.samples == "grouped" and not fmt.groupable:
        raise ConfigError(
            f"--samples grouped writes JSON lines ({', '.join(grouped_formats())}), not {fmt.name}: export "
            "one row per answer and group them by the primary_id column"
        )
    corpus = open_corpus(target)
    counts = ExportCounts(source=corpus.shown, failed=corpus.failed, remote_note=corpus.remote_note)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if fmt.writer in ("parquet", "dataset"):
            _write_table(corpus, dest, opts, counts, fmt)
        else:
            with atomic_file(dest) as fh:
                for line in _lines(corpus, opts, counts, fmt):
                    fh.write(line)
                _refuse_empty(counts, opts, dest)
                _refuse_disagreeing(counts, opts, dest)
        counts_path(dest).write_bytes(orjson.dumps(counts.as_dict(), option=orjson.OPT_INDENT_2))
    except OSError as exc:
        raise OutputError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    return counts


def _refuse_empty(counts: ExportCounts, opts: ExportOptions, dest: Path) -> None:
    if counts.kept or opts.allow_empty:
        return
    why = "the job has no completed record" if not counts.completed else "every record was left out"
    raise OutputError(
        f"nothing to export from {counts.source}: {why}\n{counts.render()}\n{dest} is left as it was; pass "
        "--allow-empty to write an empty export"
    )


def _refuse_disagreeing(counts: ExportCounts, opts: ExportOptions, dest: Path) -> None:
    usage = counts.tokens.usage if counts.tokens is not None else None
    if opts.strict and usage is not None and usage.disagrees:
        raise ConfigError(f"{usage.warning()}\n{dest} is left as it was (--strict)")


def _write_table(corpus: Corpus, dest: Path, opts: ExportOptions, counts: ExportCounts, fmt: Format) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string())])
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("messages", pa.list_(message)),
            ("finish_reason", pa.string()),
            ("prompt_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("prompt_token_ids", pa.list_(pa.int32())),
            ("completion_token_ids", pa.list_(pa.int32())),
            ("thinking", pa.bool_()),  # the mode as sent (null: nothing sent)
            ("primary_id", pa.string()),  # samples: N — the input row's id (null with one answer per prompt)
            ("sample", pa.int64()),
            ("fields", pa.string()),  # the kept input columns, as a JSON object
        ]
    )
    with tempfile.TemporaryDirectory(dir=dest.parent) as work:
        parquet = Path(work) / "data.parquet"
        with pq.ParquetWriter(parquet, schema) as writer:
            batch: list[dict[str, Any]] = []
            for _, rec in _kept(corpus, opts, counts):
                batch.append(to_row(rec, opts, fmt))
                if len(batch) >= PARQUET_BATCH:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        _refuse_empty(counts, opts, dest)
        if fmt.writer == "parquet":
            parquet.replace(dest)
            return
        import datasets

        ds = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(Path(work) / "cache"))
        if dest.exists():
            shutil.rmtree(dest)
        ds.save_to_disk(str(dest))
