"""Training-ready data from an output directory: the conversation with the generated assistant turn(s).

Formats (one record per completed prompt; failed prompts are never exported):

- ``sharegpt``        ``{"id", "conversations": [{"from": "system"|"human"|"gpt", "value"}]}``
- ``openai-messages`` ``{"id", "messages": [{"role", "content"}]}``
- ``specforge``       ``{"id", "conversations": [{"role", "content"}]}`` — what SpecForge's training loader and
  its regeneration script read and write (system turns first, then user/assistant strictly alternating)
- ``parquet``         one file: id, messages (role/content/reasoning_content), finish_reason, token counts, ids
- ``hf``              a Hugging Face dataset directory (``datasets.load_from_disk``) with the parquet columns

``reasoning_content`` is kept on assistant turns (``reasoning="keep"``) or dropped. Token ids are written
when the run captured them (``save_token_ids``): ``prompt_token_ids``/``completion_token_ids`` for one turn,
``turn_token_ids`` (a list per turn) for multi-turn regeneration. Filters drop rows by quality signal
(``drop``: truncated, empty, no_answer, repetition, degenerate, duplicate — the later copies of an answer
given to several prompts) or outside a completion-token range; empty completions are never exported. The
counts say what was kept and why the rest was dropped.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tokenmill.errors import ConfigError, OutputError
from tokenmill.output.records_reader import iter_records
from tokenmill.output.rounds import iter_live
from tokenmill.quality.corpus import DuplicateFinder, answer_chars, record_quality, selected
from tokenmill.records import Message

Format = Literal["sharegpt", "openai-messages", "specforge", "parquet", "hf"]
FORMATS: tuple[Format, ...] = ("sharegpt", "openai-messages", "specforge", "parquet", "hf")
_SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}
PARQUET_BATCH = 1000
DROP_REASONS = {
    "truncated": "truncated (finish_reason length)",
    "empty": "empty completion",
    "no_answer": "reasoning without a final answer",
    "repetition": "repetition (a loop at the answer's end)",
    "degenerate": "degenerate (loop, empty or no final answer)",
    "duplicate": "duplicate (an answer an earlier record already gave)",
}


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """What to write and what to leave out."""

    format: Format
    reasoning: Literal["keep", "drop"] = "keep"
    drop: tuple[str, ...] = ()  # quality selectors (tokenmill.quality.corpus.SELECTORS)
    min_tokens: int | None = None
    max_tokens: int | None = None
    token_ids: bool = True


@dataclass(slots=True)
class ExportCounts:
    """Rows written and rows left out, by reason."""

    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        lines = [f"kept {self.kept:,}"]
        lines += [f"dropped {n:,}: {reason}" for reason, n in sorted(self.dropped.items())]
        return "\n".join(lines)


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
    if opts.token_ids:
        row.update(_token_ids(rec))
    return row


def _kept(out: Path, opts: ExportOptions, counts: ExportCounts) -> Iterator[dict[str, Any]]:
    duplicates = DuplicateFinder()
    for rec in iter_live(out):
        reason = drop_reason(rec, opts, duplicates)
        if reason is not None:
            counts.dropped[reason] += 1
            continue
        counts.kept += 1
        yield rec


def export(out: Path, dest: Path, opts: ExportOptions) -> ExportCounts:
    """Write ``out``'s completions to ``dest`` in ``opts.format``; returns what was kept and dropped."""
    if not out.is_dir():
        raise ConfigError(f"{out} is not an output directory")
    if opts.format not in FORMATS:
        raise ConfigError(f"unknown export format {opts.format!r}; choose one of {', '.join(FORMATS)}")
    counts = ExportCounts()
    counts.dropped["failed (see failed.jsonl)"] = sum(1 for _ in iter_records(out, failed=True))
    if not counts.dropped["failed (see failed.jsonl)"]:
        del counts.dropped["failed (see failed.jsonl)"]
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if opts.format in ("parquet", "hf"):
            _write_table(out, dest, opts, counts)
        else:
            tmp = dest.with_name(dest.name + ".tmp")
            with tmp.open("wb") as fh:
                for rec in _kept(out, opts, counts):
                    fh.write(orjson.dumps(to_row(rec, opts), option=orjson.OPT_APPEND_NEWLINE))
            tmp.replace(dest)
    except OSError as exc:
        raise OutputError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    return counts


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
    }


def _write_table(out: Path, dest: Path, opts: ExportOptions, counts: ExportCounts) -> None:
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
        ]
    )
    with tempfile.TemporaryDirectory(dir=dest.parent) as work:
        parquet = Path(work) / "data.parquet" if opts.format == "hf" else dest.with_name(dest.name + ".tmp")
        with pq.ParquetWriter(parquet, schema) as writer:
            batch: list[dict[str, Any]] = []
            for rec in _kept(out, opts, counts):
                batch.append(_table_rows(rec, opts))
                if len(batch) >= PARQUET_BATCH:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        if opts.format == "parquet":
            parquet.replace(dest)
            return
        import datasets

        ds = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(Path(work) / "cache"))
        if dest.exists():
            shutil.rmtree(dest)
        ds.save_to_disk(str(dest))
