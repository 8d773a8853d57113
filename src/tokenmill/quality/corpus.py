"""The quality of a whole corpus: its records' signals summed up (``tokenmill inspect``, the report's section,
``export --drop``).

One pass over the records, memory bounded by the corpus's size in small numbers (two lengths and an 8-byte
hash per record, a few examples): counts per signal, output lengths per finish reason, the worst loops with an
excerpt of where each starts, answers given to more than one prompt, and what a trainer with a given maximum
sequence length would cut (:meth:`CorpusQuality.train_cut`). Records written before the signals
existed get them computed on the way.
"""

from __future__ import annotations

import hashlib
import heapq
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.fmt import UNKNOWN, num
from tokenmill.quality.records import DuplicateFinder, answer_digest, record_quality
from tokenmill.quality.registry import DEGENERATE, EXAMPLE_FLAGS, FLAGS, group
from tokenmill.records.read import CompletionRecord, id_key
from tokenmill.storage.corpus import open_corpus

EXAMPLES = 5  # worst examples kept per signal
EXCERPT_CHARS = 240
DUPLICATE_IDS_SHOWN = 5


@dataclass(slots=True)
class Example:
    """One record shown as an example: why, how bad, and the part of the answer that shows it."""

    id: str
    flags: list[str]
    repetition_score: float
    finish_reason: str | None
    completion_tokens: int | None
    excerpt: str
    where: str  # "loop from character 1,204 of 2,400", "empty", ...

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "flags": self.flags,
            "repetition_score": self.repetition_score,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens,
            "where": self.where,
            "excerpt": self.excerpt,
        }


def loop_start(answer: str) -> int:
    """Where the loop at the end of ``answer`` begins (roughly): the first place its last words occur."""
    tail = answer.rstrip()[-48:]
    if len(tail) < 8:
        return max(0, len(answer) - EXCERPT_CHARS)
    return answer.find(tail)


def excerpt(rec: CompletionRecord, flags: list[str]) -> tuple[str, str]:
    """The part of the record's answer that shows its worst signal, and where that is."""
    text = rec.answer.text
    reasoning = rec.answer.reasoning_content or ""
    if "repetition" in flags:
        body = text if text.strip() else reasoning or text
        at = loop_start(body)
        start = max(0, at - EXCERPT_CHARS // 3)
        cut = body[start : start + EXCERPT_CHARS]
        return ("…" if start else "") + cut + ("…" if start + EXCERPT_CHARS < len(body) else ""), (
            f"loop from character {at:,} of {len(body):,}"
        )
    if "no_answer" in flags:
        body = reasoning or text
        return "…" + body[-EXCERPT_CHARS:], f"reasoning of {len(body):,} characters, no final answer"
    if "empty" in flags:
        return "", "empty answer"
    if "think_markers" in flags:
        at = min(i for i in (text.find("<think>"), text.find("</think>"), len(text)) if i >= 0)
        start = max(0, at - EXCERPT_CHARS // 3)
        cut = text[start : start + EXCERPT_CHARS]
        return ("…" if start else "") + cut, f"think marker at character {at:,} of the answer"
    return "…" + text[-EXCERPT_CHARS:], f"the end of {len(text):,} characters"


@dataclass(slots=True)
class Lengths:
    """Output lengths (completion tokens) of the records with one finish reason."""

    tokens: array[int] = field(default_factory=lambda: array("q"))

    def summary(self) -> dict[str, Any]:
        values = sorted(self.tokens)
        n = len(values)
        if not n:
            return {"count": 0}

        def at(q: float) -> int:
            return values[min(n - 1, int(q * n))]

        return {
            "count": n,
            "mean": round(statistics.fmean(values), 1),
            "p10": at(0.10),
            "p50": at(0.50),
            "p90": at(0.90),
            "p99": at(0.99),
            "max": values[-1],
        }


def sequence_tokens(rec: CompletionRecord) -> int | None:
    """Tokens a trainer sees for the record: the prompt plus the answer, all turns (a conversation's last turn was
    sent with every earlier turn and answer, so its prompt and answer are the whole conversation); None when the
    record has no token counts."""
    last = rec.answers[-1]
    prompt, completion = last.prompt_tokens, last.completion_tokens
    if prompt is None or completion is None:
        return None
    return prompt + completion


@dataclass(frozen=True, slots=True)
class TrainCut:
    """What a trainer with maximum sequence length ``max_length`` would cut of a corpus."""

    max_length: int
    records: int  # records with token counts
    cut: int  # of them, longer than max_length
    tokens: int  # their tokens, prompt and answer
    tokens_cut: int  # tokens past max_length
    unknown: int = 0  # records without token counts (not judged)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_length": self.max_length,
            "records": self.records,
            "records_cut": self.cut,
            "records_cut_rate": self.cut / self.records if self.records else None,
            "tokens": self.tokens,
            "tokens_cut": self.tokens_cut,
            "tokens_cut_rate": self.tokens_cut / self.tokens if self.tokens else None,
            "records_without_token_counts": self.unknown,
        }

    def render(self) -> str:
        if not self.records:
            return f"train max length {self.max_length:,}: no record has token counts to judge by"
        line = (
            f"train max length {self.max_length:,}: {self.cut:,} of {self.records:,} records "
            f"({self.cut / self.records * 100:.1f}%) are longer and would be cut; "
            f"{self.tokens_cut:,} of {self.tokens:,} tokens ({self.tokens_cut / max(self.tokens, 1) * 100:.1f}%) lost"
        )
        return line + (f" ({self.unknown:,} records without token counts not judged)" if self.unknown else "")


@dataclass(slots=True)
class CorpusQuality:
    """Everything ``inspect`` shows about a corpus."""

    records: int = 0
    failed: int = 0
    flagged: Counter[str] = field(default_factory=Counter)
    degenerate: int = 0
    duplicates: int = 0  # records whose answer an earlier record already gave
    lengths: dict[str, Lengths] = field(default_factory=dict)
    worst: dict[str, list[Example]] = field(default_factory=dict)
    duplicate_groups: dict[str, list[str]] = field(default_factory=dict)  # answer hash -> ids (first few)
    duplicate_sizes: Counter[str] = field(default_factory=Counter)
    source: str = ""
    sequence_lengths: array[int] = field(default_factory=lambda: array("q"))  # per record with token counts
    unknown_lengths: int = 0  # records without token counts
    sampled: int = 0  # records that are one of several samples of a prompt (samples: N)
    sample_duplicates: int = 0  # of them, answers an earlier sample of the same prompt already gave
    sample_duplicate_ids: list[tuple[str, str]] = field(default_factory=list)  # (earlier, later) ids, first few

    def train_cut(self, max_length: int) -> TrainCut:
        """What a trainer with maximum sequence length ``max_length`` (prompt + answer, all turns) would cut."""
        cut = tokens = lost = 0
        for n in self.sequence_lengths:
            tokens += n
            if n > max_length:
                cut += 1
                lost += n - max_length
        return TrainCut(max_length, len(self.sequence_lengths), cut, tokens, lost, self.unknown_lengths)

    def rate(self, count: int) -> float | None:
        return count / self.records if self.records else None

    def counts(self) -> list[tuple[str, int]]:
        """Records per signal, then duplicates and degenerate records."""
        rows = [(name, self.flagged[name]) for name in FLAGS]
        return [*rows, ("duplicate", self.duplicates), ("degenerate", self.degenerate)]

    def as_dict(self) -> dict[str, Any]:
        biggest = self.duplicate_sizes.most_common(EXAMPLES)
        return {
            "source": self.source,
            "records": self.records,
            "failed": self.failed,
            "signals": {name: {"count": n, "rate": self.rate(n)} for name, n in self.counts()},
            "lengths": {reason: ls.summary() for reason, ls in sorted(self.lengths.items())},
            "worst": {name: [e.as_dict() for e in ex] for name, ex in self.worst.items()},
            "duplicates": [
                {"answer_hash": h, "records": n, "ids": self.duplicate_groups[h]} for h, n in biggest if n > 1
            ],
        } | ({"sample_duplicates": self._sample_duplicates()} if self.sampled else {})

    def _sample_duplicates(self) -> dict[str, Any]:
        return {
            "sampled_records": self.sampled,
            "count": self.sample_duplicates,
            "rate": self.sample_duplicates / self.sampled,
            "examples": [{"first": a, "repeated_by": b} for a, b in self.sample_duplicate_ids],
        }

    def render(self) -> str:
        """The terminal table."""
        lines = [f"{self.source}: {self.records:,} completions, {self.failed:,} failed", ""]
        lines.append(f"{'signal':<12} {'records':>10} {'rate':>8}")
        for name, count in self.counts():
            rate = self.rate(count)
            lines.append(f"{name:<12} {count:>10,} {UNKNOWN if rate is None else f'{rate * 100:.2f}%':>8}")
        lines.append(f"  (degenerate: {group('degenerate').hint})")
        lines += ["", f"{'finish':<12} {'count':>9} {'mean':>8} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}"]
        for reason, ls in sorted(self.lengths.items()):
            s = ls.summary()
            cells = [num(s.get(k)) for k in ("mean", "p50", "p90", "p99", "max")]
            lines.append(f"{reason:<12} {s['count']:>9,} " + " ".join(f"{c:>7}" for c in cells))
        for name, examples in self.worst.items():
            if not examples:
                continue
            lines += ["", f"worst {name}:"]
            for e in examples:
                score = f"  score {e.repetition_score:.2f}" if name == "repetition" else ""
                lines.append(f"  {e.id}{score}  {e.where}")
                if e.excerpt:
                    lines.append("    " + " ".join(e.excerpt.split())[:160])
        if self.sampled:
            rate = self.sample_duplicates / self.sampled * 100
            lines += [
                "",
                f"answers repeated within a prompt's samples: {self.sample_duplicates:,} of "
                f"{self.sampled:,} sampled records ({rate:.2f}%)",
            ]
            lines += [f"  {b} repeats {a}" for a, b in self.sample_duplicate_ids]
        groups = [(h, n) for h, n in self.duplicate_sizes.most_common(EXAMPLES) if n > 1]
        if groups:
            lines += ["", "answers given to more than one prompt:"]
            for h, n in groups:
                ids = ", ".join(self.duplicate_groups[h])
                lines.append(f"  {n:,} records ({ids}{', …' if n > len(self.duplicate_groups[h]) else ''})")
        return "\n".join(lines)


class Tally:
    """Adds records up into a :class:`CorpusQuality` (one pass, in reading order)."""

    def __init__(self, source: str = "", examples: int = EXAMPLES) -> None:
        self.result = CorpusQuality(source=source)
        self._dups = DuplicateFinder()
        self._sample_dups = DuplicateFinder()  # keyed by (prompt, answer): repeats among one prompt's samples
        self._examples = examples
        self._heaps: dict[str, list[tuple[float, int, Example]]] = {}
        self._n = 0

    def add(self, rec: CompletionRecord) -> dict[str, Any]:
        """Count one completion record; returns its signals."""
        q = record_quality(rec)
        r = self.result
        r.records += 1
        flags = list(q["flags"])
        for name in flags:
            r.flagged[name] += 1
        if any(name in DEGENERATE for name in flags):
            r.degenerate += 1
        tokens = rec.completion_tokens
        reason = rec.finish_reason or "none"  # "length" when any turn was cut, as the truncated signal says
        if tokens is not None:
            r.lengths.setdefault(reason, Lengths()).tokens.append(tokens)
        whole = sequence_tokens(rec)
        if whole is None:
            r.unknown_lengths += 1
        else:
            r.sequence_lengths.append(whole)
        self._duplicate(rec, q)
        for name in flags:
            if name in EXAMPLE_FLAGS:
                self._keep(name, float(q.get("repetition_score") or 0.0), rec, flags)
        return q

    def failure(self) -> None:
        self.result.failed += 1

    def _duplicate(self, rec: CompletionRecord, q: dict[str, Any]) -> None:
        primary = rec.primary_id
        if primary is not None:
            self.result.sampled += 1
        if "empty" in q["flags"] or "no_answer" in q["flags"]:
            return
        h = answer_digest(rec)
        if h is None:  # too short to count as a repeat
            return
        if primary is not None:
            self._sample_duplicate(rec, id_key(primary), h)
        first = self._dups.seen(rec.key, h)
        if first is None:
            return
        r = self.result
        r.duplicates += 1
        if h not in r.duplicate_groups:
            r.duplicate_groups[h] = [first]
            r.duplicate_sizes[h] = 1
        r.duplicate_sizes[h] += 1
        if len(r.duplicate_groups[h]) < DUPLICATE_IDS_SHOWN:
            r.duplicate_groups[h].append(rec.key)

    def _sample_duplicate(self, rec: CompletionRecord, primary: str, answer_hash: str) -> None:
        key = hashlib.blake2b(f"{primary}\0{answer_hash}".encode(), digest_size=8).hexdigest()
        first = self._sample_dups.seen(rec.key, key)
        if first is None:
            return
        r = self.result
        r.sample_duplicates += 1
        if len(r.sample_duplicate_ids) < EXAMPLES:
            r.sample_duplicate_ids.append((first, rec.key))

    def _keep(self, name: str, score: float, rec: CompletionRecord, flags: list[str]) -> None:
        heap = self._heaps.setdefault(name, [])
        self._n += 1
        key = (score, -self._n)  # ties: the earliest record first
        if len(heap) >= self._examples and key <= heap[0][:2]:
            return
        text, where = excerpt(rec, flags)
        example = Example(
            id=rec.key,
            flags=flags,
            repetition_score=score,
            finish_reason=rec.finish_reason,
            completion_tokens=rec.completion_tokens,
            excerpt=text,
            where=where,
        )
        item = (score, -self._n, example)
        if len(heap) < self._examples:
            heapq.heappush(heap, item)
        else:
            heapq.heapreplace(heap, item)

    def finish(self) -> CorpusQuality:
        r = self.result
        r.worst = {
            name: [e for _, _, e in sorted(self._heaps.get(name, []), key=lambda x: (-x[0], -x[1]))]
            for name in EXAMPLE_FLAGS
            if self._heaps.get(name)
        }
        return r


def inspect_records(
    records: Iterable[CompletionRecord], source: str, failed: int = 0, examples: int = EXAMPLES
) -> CorpusQuality:
    """The quality of the completion records read from ``source``."""
    tally = Tally(source, examples)
    for rec in records:
        if rec.status == "ok":
            tally.add(rec)
    tally.result.failed = failed
    return tally.finish()


def inspect_output(target: str | Path, examples: int = EXAMPLES) -> CorpusQuality:
    """The quality of the live completions of an output directory or a remote prefix, wherever its records are
    (:func:`~tokenmill.storage.corpus.open_corpus`; a run in progress too: whole lines only)."""
    corpus = open_corpus(target)
    return inspect_records(corpus.iter_live(), corpus.shown, corpus.failed, examples)
