"""Training-ready data from an output directory: the conversation with the generated assistant turn(s).

Formats (one record per completed prompt; failed prompts are never exported):

- ``sharegpt``        ``{"id", "conversations": [{"from": "system"|"human"|"gpt", "value"}]}``
- ``openai-messages`` ``{"id", "messages": [{"role", "content"}]}``
- ``specforge``       ``{"id", "conversations": [{"role", "content"}]}`` — what SpecForge's training loader and
  its regeneration script read and write (system turns first, then user/assistant strictly alternating)
- ``tokens``          ``{"id", "input_ids", "loss_mask", "token_source", "finish_reason"}`` — pre-tokenized rows
  (SpecForge ``data.prompts_path``, vLLM speculators), built by :mod:`tokenmill.tokens`
- ``parquet``         one file: id, messages (role/content/reasoning_content), finish_reason, token counts, ids
- ``hf``              a Hugging Face dataset directory (``datasets.load_from_disk``) with the parquet columns

``reasoning_content`` is kept on assistant turns (``reasoning="keep"``) or dropped. Every row carries
``thinking``, the thinking mode the answer was generated with (true, false, or null: none was sent). Token ids
are written when the run captured them (``save_token_ids``): ``prompt_token_ids``/``completion_token_ids`` for one turn,
``turn_token_ids`` (a list per turn) for multi-turn regeneration. Filters drop rows by quality signal
(``drop``: truncated, empty, no_answer, repetition, think_markers, degenerate, duplicate — the later copies of an
answer given to several prompts) or outside a completion-token range; empty completions are never exported. The
counts say what was kept and why the rest was dropped.

A job with ``samples: N`` exports one row per answer (its id ``{id}_gen{k}``, the input row's id in
``primary_id``, ``sample`` k), or with ``samples="grouped"`` one row per prompt, ``{"id", "answers": [...]}``
(:mod:`tokenmill.quality.samples`; JSON lines formats only).
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
from tokenmill.fsio import atomic_file
from tokenmill.quality.records import DuplicateFinder, answer_chars, record_quality, selected
from tokenmill.quality.registry import REASONS
from tokenmill.quality.samples import SampleGroups
from tokenmill.records import Message
from tokenmill.storage.corpus import Corpus, open_corpus
from tokenmill.tokens import LeftOut, TokenCounts, TokenOptions, TokenRows, job_setting

Format = Literal["sharegpt", "openai-messages", "specforge", "tokens", "parquet", "hf"]
FORMATS: tuple[Format, ...] = ("sharegpt", "openai-messages", "specforge", "tokens", "parquet", "hf")
_SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}
PARQUET_BATCH = 1000
GROUP_BUFFER = 8192  # export --samples grouped: at most this many answers held (quality.samples.SampleGroups)
DROP_REASONS = REASONS  # why a record was left out, per --drop selector (the quality signals' table)


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """What to write and what to leave out."""

    format: Format
    reasoning: Literal["keep", "drop"] = "keep"
    drop: tuple[str, ...] = ()  # quality selectors (tokenmill.quality.corpus.SELECTORS)
    min_tokens: int | None = None
    max_tokens: int | None = None
    token_ids: bool = True
    allow_empty: bool = False  # writing no row at all is an error unless asked for
    samples: Literal["answers", "grouped"] = "answers"  # samples: N — one row per answer, or one per prompt
    group_buffer: int = GROUP_BUFFER  # --samples grouped: answers held at most while their prompt's others come
    tokens: TokenOptions = field(default_factory=TokenOptions)  # format tokens: tokenizer, per_turn, max_length
    keep_fields: tuple[str, ...] | Literal["all"] = ()  # the input's own columns (record field ``fields``) to carry


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


def conversation(rec: dict[str, Any], reasoning: bool) -> list[Message]:
    """The prompt's turns with the generated assistant turn(s) in place."""
    prompt = rec.get("prompt")
    given: list[Message] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt or [])
    turns = rec.get("turns")
    answers = turns if turns else [rec]
    out: list[Message] = []
    users_seen = 0
    for msg in given:
        out.append({"role": msg["role"], "content": msg["content"]})
        if msg["role"] == "user" and turns:
            out.append(_assistant(answers[users_seen], reasoning))
            users_seen += 1
    if not turns:
        out.append(_assistant(rec, reasoning))
    return out


def _assistant(answer: dict[str, Any], reasoning: bool) -> Message:
    msg: Message = {"role": "assistant", "content": answer.get("completion", "")}
    if reasoning and answer.get("reasoning_content"):
        msg["reasoning_content"] = answer["reasoning_content"]
    return msg


def drop_reason(rec: dict[str, Any], opts: ExportOptions, duplicates: DuplicateFinder | None = None) -> str | None:
    """Why a record is left out under ``opts``, or None to keep it (``duplicates`` remembers the answers kept)."""
    answers = rec.get("turns") or [rec]
    if any(not (a.get("completion") or "").strip() for a in answers):
        return "empty completion"
    if opts.drop:
        quality = record_quality(rec)
        repeat = duplicates is not None and "duplicate" in opts.drop and _repeats(rec, quality, duplicates)
        chosen = selected(quality["flags"], repeat, opts.drop)
        if chosen is not None:
            return DROP_REASONS.get(chosen, chosen)
    tokens = rec.get("completion_tokens")
    if opts.min_tokens is not None and (tokens is None or tokens < opts.min_tokens):
        return f"fewer than {opts.min_tokens} completion tokens"
    if opts.max_tokens is not None and (tokens is None or tokens > opts.max_tokens):
        return f"more than {opts.max_tokens} completion tokens"
    return None


def _repeats(rec: dict[str, Any], quality: dict[str, Any], duplicates: DuplicateFinder) -> bool:
    return duplicates.seen(str(rec.get("id")), quality["answer_hash"], answer_chars(rec)) is not None


def _token_ids(rec: dict[str, Any]) -> dict[str, Any]:
    turns = rec.get("turns")
    if turns:
        if any("completion_token_ids" in t for t in turns):
            keys = ("prompt_token_ids", "completion_token_ids")
            return {"turn_token_ids": [{k: t.get(k) for k in keys} for t in turns]}
        return {}
    if rec.get("completion_token_ids") is None:
        return {}
    return {"prompt_token_ids": rec.get("prompt_token_ids"), "completion_token_ids": rec["completion_token_ids"]}


def to_row(rec: dict[str, Any], opts: ExportOptions) -> dict[str, Any]:
    """One exported JSON row in ``opts.format`` (the jsonl formats)."""
    messages = conversation(rec, opts.reasoning == "keep")
    row: dict[str, Any] = {"id": rec["id"]}
    if opts.format == "sharegpt":
        convo = []
        for m in messages:
            turn = {"from": _SHAREGPT_FROM[m["role"]], "value": m["content"]}
            if "reasoning_content" in m:
                turn["reasoning_content"] = m["reasoning_content"]
            convo.append(turn)
        row["conversations"] = convo
    elif opts.format == "specforge":
        row["conversations"] = messages
    else:
        row["messages"] = messages
    if rec.get("sample") is not None:  # samples: N — the id is {primary_id}_gen{sample}
        row["primary_id"], row["sample"] = rec.get("primary_id"), rec["sample"]
    row["thinking"] = rec.get("thinking")  # the mode as sent: true, false, or null (nothing sent)
    if opts.token_ids:
        row.update(_token_ids(rec))
    for key, value in kept_fields(rec, opts).items():
        if key in row:
            raise ConfigError(
                f"--keep-fields {key}: the exported row has a field of that name already ({', '.join(row)}); "
                "leave it out of --keep-fields"
            )
        row[key] = value
    return row


def kept_fields(rec: dict[str, Any], opts: ExportOptions) -> dict[str, Any]:
    """The record's input columns (``fields``) that ``opts.keep_fields`` carries into the export."""
    fields = rec.get("fields") or {}
    if opts.keep_fields == "all":
        return dict(fields)
    return {k: fields[k] for k in opts.keep_fields if k in fields}


def _kept(
    corpus: Corpus, opts: ExportOptions, counts: ExportCounts, left_out: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[dict[str, Any]]:
    duplicates = DuplicateFinder()
    for rec in corpus.iter_live():
        counts.completed += 1
        if "round" in rec:
            counts.regenerated += 1
        reason = drop_reason(rec, opts, duplicates)
        if reason is not None:
            counts.dropped[reason] += 1
            if left_out is not None:
                left_out(rec)
            continue
        counts.kept += 1
        yield rec
    counts.read_from = {("local" if k == "local" else f"from {corpus.remote}"): n for k, n in corpus.read.items()}


def _jsonl_rows(corpus: Corpus, opts: ExportOptions, counts: ExportCounts) -> Iterator[dict[str, Any]]:
    """The exported JSON rows: one per kept record, or with ``--samples grouped`` one per prompt."""
    if opts.format == "tokens":
        yield from _token_rows(corpus, opts, counts)
        return
    if opts.samples == "grouped":
        yield from _grouped(corpus, opts, counts)
        return
    for rec in _kept(corpus, opts, counts):
        yield to_row(rec, opts)


def _token_rows(corpus: Corpus, opts: ExportOptions, counts: ExportCounts) -> Iterator[dict[str, Any]]:
    """``--format tokens``: each kept record's token rows (:mod:`tokenmill.tokens`); a record that yields none
    is left out with its reason."""
    job = corpus.local  # the job's tokenizer and api, as its job.json records them
    builder = TokenRows(
        opts.tokens, job_setting(job, "tokenizer") if job else None, job_setting(job, "api") if job else None
    )
    counts.tokens = builder.counts
    for rec in _kept(corpus, opts, counts):
        try:
            rows = builder.rows(rec)
        except LeftOut as why:
            counts.kept -= 1
            counts.dropped[str(why)] += 1
            continue
        extra = kept_fields(rec, opts)
        for row in rows:
            yield {**row, **{k: v for k, v in extra.items() if k not in row}}


def _grouped(corpus: Corpus, opts: ExportOptions, counts: ExportCounts) -> Iterator[dict[str, Any]]:
    """``--samples grouped``: one row per prompt, its answers' rows in ``answers`` (quality.samples)."""
    groups = SampleGroups(opts.group_buffer)
    for rec in _kept(corpus, opts, counts, groups.left_out):
        groups.add(rec, to_row(rec, opts))
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
    :func:`counts_path`. A completed record that cannot be read, or an export of nothing (unless
    ``opts.allow_empty``), is an :class:`OutputError` and leaves ``dest`` as it was."""
    if opts.format not in FORMATS:
        raise ConfigError(f"unknown export format {opts.format!r}; choose one of {', '.join(FORMATS)}")
    if opts.samples == "grouped" and opts.format in ("tokens", "parquet", "hf"):
        raise ConfigError(
            f"--samples grouped writes JSON lines (sharegpt, openai-messages, specforge), not {opts.format}: export "
            "one row per answer and group them by the primary_id column"
        )
    corpus = open_corpus(target)
    counts = ExportCounts(source=corpus.shown, failed=corpus.failed, remote_note=corpus.remote_note)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if opts.format in ("parquet", "hf"):
            _write_table(corpus, dest, opts, counts)
        else:
            with atomic_file(dest) as fh:
                for row in _jsonl_rows(corpus, opts, counts):
                    fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
                _refuse_empty(counts, opts, dest)
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


def _table_rows(rec: dict[str, Any], opts: ExportOptions) -> dict[str, Any]:
    messages = conversation(rec, opts.reasoning == "keep")
    ids = _token_ids(rec) if opts.token_ids else {}
    return {
        "id": rec["id"],
        "messages": [
            {"role": m["role"], "content": m["content"], "reasoning_content": m.get("reasoning_content")}
            for m in messages
        ],
        "finish_reason": rec.get("finish_reason"),
        "prompt_tokens": rec.get("prompt_tokens"),
        "completion_tokens": rec.get("completion_tokens"),
        "prompt_token_ids": ids.get("prompt_token_ids"),
        "completion_token_ids": ids.get("completion_token_ids"),
        "thinking": rec.get("thinking"),
        "primary_id": rec.get("primary_id"),
        "sample": rec.get("sample"),
        "fields": orjson.dumps(kept).decode() if (kept := kept_fields(rec, opts)) else None,
    }


def _write_table(corpus: Corpus, dest: Path, opts: ExportOptions, counts: ExportCounts) -> None:
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
            for rec in _kept(corpus, opts, counts):
                batch.append(_table_rows(rec, opts))
                if len(batch) >= PARQUET_BATCH:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        _refuse_empty(counts, opts, dest)
        if opts.format == "parquet":
            parquet.replace(dest)
            return
        import datasets

        ds = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(Path(work) / "cache"))
        if dest.exists():
            shutil.rmtree(dest)
        ds.save_to_disk(str(dest))
