"""A record's quality: its signals (as written, or computed now for a record written without them), the
selectors it matches (``export --drop``, ``regenerate --where``), and whether it repeats an earlier answer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tokenmill.errors import ConfigError
from tokenmill.quality.registry import DEGENERATE, SELECTORS
from tokenmill.quality.signals import answer_hash, combined, final_answer, signals
from tokenmill.records.read import Answer, CompletionRecord

DUPLICATE_MIN_CHARS = 64  # shorter answers ("Yes.", "4") are legitimately the same for different prompts


def record_quality(rec: CompletionRecord) -> dict[str, Any]:
    """The record's signals as written, or computed now for a record written without them."""
    quality = rec.answer.quality
    if quality is not None and "flags" in quality:
        return quality
    if rec.turns:
        return combined([_answer_signals(t) for t in rec.turns])
    return _answer_signals(rec.answer)


def _answer_signals(answer: Answer) -> dict[str, Any]:
    quality = answer.quality
    if quality is not None and "flags" in quality:
        return quality
    return signals(answer.text, answer.finish_reason, answer.reasoning_content).as_dict()


def selected(flags: Iterable[str], duplicate: bool, selectors: Iterable[str]) -> str | None:
    """The first selector (``export --drop``, ``regenerate --where``) a record with ``flags`` matches."""
    fired = set(flags)
    for sel in selectors:
        if sel == "degenerate" and fired.intersection(DEGENERATE):
            return sel
        if sel == "duplicate" and duplicate:
            return sel
        if sel in fired:
            return sel
    return None


def parse_selectors(text: str, option: str) -> tuple[str, ...]:
    """``"degenerate,truncated"`` -> the selectors; an unknown one is a ConfigError naming the choices."""
    chosen = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in chosen if s not in SELECTORS]
    if unknown or not chosen:
        raise ConfigError(f"{option} takes a comma-separated list of {', '.join(SELECTORS)}; got {text!r}")
    return chosen


class DuplicateFinder:
    """Which records repeat an answer an earlier record (in reading order) already gave."""

    def __init__(self) -> None:
        self._first: dict[int, str] = {}

    def seen(self, rec_id: str, digest: str | None) -> str | None:
        """The id of the earlier record whose answer has this :func:`answer_digest`, or None (the first of its
        kind, or an answer too short to count: no digest)."""
        if digest is None:
            return None
        first = self._first.setdefault(int(digest, 16), rec_id)
        return None if first == rec_id else first


def answer_digest(rec: CompletionRecord) -> str | None:
    """The hash of the record's final answer (its last turn's, after any thinking block, surrounding whitespace
    aside), or None when that answer is shorter than :data:`DUPLICATE_MIN_CHARS`. Computed as the corpus is
    read, never taken from the record: one function for records of every age."""
    answer = final_answer(rec.answer.text)[0].strip()
    return answer_hash(answer) if len(answer) >= DUPLICATE_MIN_CHARS else None
