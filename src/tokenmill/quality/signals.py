"""Signals of a degenerate answer, computed when its record is written (bounded work: the answer's tail only).

The signals' table (names, what each means, which are degenerate) is :mod:`tokenmill.quality.registry`.

- ``truncated``: the answer hit ``max_tokens`` (finish reason ``length``).
- ``empty``: the answer is blank (whitespace only).
- ``no_answer``: the model reasoned (``reasoning_content``, or a ``<think>`` block) but gave no final answer,
  including a thinking block that never closes.
- ``repetition``: a loop at the end of the answer. Three views of the answer's end: how long it repeats exactly
  (a model's loop usually does), the share of word 4-grams that repeat an earlier one (a loop that varies a
  little), how well the tail compresses (a loop of characters without spaces). Calibrated on prose and code
  that must not trip it (tests/unit/quality/test_quality_signals.py); docs/quality.md has the numbers.
- ``think_markers``: a thinking marker (``<think>`` or ``</think>``) left in the answer as returned: the server
  gave the reasoning back inline (no ``--reasoning-parser``, or a completion API). A trainer that renders the
  answer through a thinking template would train on the markers; SpecForge's own regeneration rejects such rows.
  Not *degenerate*: the answer after the block may be good, and inline thinking may be intended.

The same answer given to different prompts is found when the corpus is read, by :func:`answer_hash` of each
record's final answer (:func:`tokenmill.quality.records.answer_digest`): a pass over the whole answer, which the
writer does not pay per completion. Records written before carry it as ``quality.answer_hash`` (the same value);
it is not read back.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Any

from tokenmill.quality.registry import FLAGS
from tokenmill.records import THINK_CLOSE, THINK_OPEN

PROBE = 32  # characters at the answer's end that a loop repeats a period earlier
PERIODIC_MIN_CHARS = 300  # an exact repeat at the end at least this long (about 75 tokens) scores LOOP_SCORE
MIN_PERIODS = 3  # ... made of at least this many periods
TAILS = (600, 3000)  # characters of the answer's end looked at; a loop that fills either window is found
NGRAM = 4
MIN_NGRAMS = 40  # fewer words than this: too short to call a loop by repeated n-grams
LOOP_SCORE = 0.7  # a score at least this: a loop (prose stays below 0.3, library code below 0.5)
MIN_COMPRESS_BYTES = 256
WORDED_CHARS = 16  # a tail with fewer than one word per this many characters is checked by compression
LOOP_COMPRESS_RATIO = 0.08  # compressed/raw at most this scores LOOP_SCORE (prose and code stay above 0.2)


@dataclass(slots=True)
class Signals:
    """What one answer shows; ``repetition_score`` is the stronger of the two loop views, 0 (none) to 1. Built
    for every completion, so not frozen (a frozen dataclass's ``__init__`` costs twice as much)."""

    truncated: bool
    empty: bool
    no_answer: bool
    repetition: bool
    repetition_score: float
    think_markers: bool = False

    def flags(self) -> list[str]:
        """The names of the signals that fire, in :data:`FLAGS` order."""
        return [name for name in FLAGS if getattr(self, name)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "flags": self.flags(),
            "repetition_score": self.repetition_score,
        }


def final_answer(text: str) -> tuple[str, bool]:
    """The answer after any thinking block, and whether a thinking block was left open. A closing tag without
    an opening one is a thinking block whose opening tag was part of the prompt (chat templates that start the
    assistant turn with it)."""
    if "<" not in text:  # no tag at all: one memchr, the common case
        return text, False
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        return text[close + len(THINK_CLOSE) :], False
    if THINK_OPEN in text:
        return "", True
    return text, False


def ngram_share(words: list[str]) -> float:
    """The share of the words' 4-grams that repeat an earlier one (0 when there are too few words)."""
    count = len(words) - NGRAM + 1
    if count < MIN_NGRAMS:
        return 0.0
    grams = set(zip(*(words[i:] for i in range(NGRAM)), strict=False))
    return 1.0 - len(grams) / count


def compress_ratio(tail: str) -> float | None:
    """Compressed size over raw size of the tail (None when it is too short to say)."""
    raw = tail.encode("utf-8", "replace")
    if len(raw) < MIN_COMPRESS_BYTES:
        return None
    return len(zlib.compress(raw, 1)) / len(raw)


def periodic_run(end: str, period: int) -> tuple[int, int]:
    """How many characters at the end of ``end`` repeat exactly with ``period`` (counted in whole periods, up to
    what scores 1), and how many periods that is."""
    n, repeats = len(end), 0
    enough = PERIODIC_MIN_CHARS / LOOP_SCORE
    while (repeats + 2) * period <= n and (repeats + 1) * period < enough:
        a = n - (repeats + 1) * period
        if end[a : a + period] != end[a - period : a]:
            break
        repeats += 1
    return ((repeats + 1) * period if repeats else 0), repeats + 1


def loop_score(answer: str) -> tuple[bool, float]:
    """Whether the answer ends in a loop, and the score (see the module docstring).

    First a probe that costs a microsecond: a loop's last :data:`PROBE` characters occur once more a period
    earlier; an answer whose end appears nowhere else in the window does not end in a loop (score 0), and most
    answers stop there. Then the exact view: how much of the end repeats with that period (a model's loop is
    usually exact). Then, for loops that are not exact, the share of repeated word 4-grams, or for text not
    spelled in words (few spaces: a run of symbols, a script written without spaces) the compression ratio,
    each mapped onto one scale where :data:`LOOP_SCORE` is a loop."""
    end = answer.rstrip()
    window = end[-TAILS[-1] :]
    probe = window[-PROBE:]
    earlier = window.rfind(probe, 0, len(window) - 1) if len(window) >= 2 * PROBE else -1
    if earlier < 0:
        return False, 0.0
    run, periods = periodic_run(end, len(window) - PROBE - earlier)
    score = min(1.0, LOOP_SCORE * run / PERIODIC_MIN_CHARS) if periods >= MIN_PERIODS else 0.0
    for size in TAILS:
        if score >= LOOP_SCORE:
            break
        tail = end[-size:]
        words = tail.split()
        score = max(score, ngram_share(words))
        if len(words) * WORDED_CHARS < len(tail):
            ratio = compress_ratio(tail)
            if ratio is not None:
                score = max(score, 1.0 - (1.0 - LOOP_SCORE) * ratio / LOOP_COMPRESS_RATIO)
        if len(end) <= size:
            break
    return score >= LOOP_SCORE, round(score, 3)


def answer_hash(answer: str) -> str:
    """A 64-bit hash of the answer without leading and trailing whitespace (equal answers, equal hashes)."""
    return hashlib.sha256(answer.strip().encode("utf-8", "replace")).hexdigest()[:16]


def signals(text: str, finish_reason: str | None, reasoning: str | None = None) -> Signals:
    """The signals of one generated answer (``text`` as returned, ``reasoning`` when the server split it off)."""
    answer, unclosed = final_answer(text)
    blank = not answer.strip()
    reasoned = unclosed or bool(reasoning and reasoning.strip()) or len(answer) < len(text)
    looping, score = loop_score(text if blank else answer)
    return Signals(
        truncated=finish_reason == "length",
        empty=blank and not reasoned,
        no_answer=reasoned and blank,
        repetition=looping,
        repetition_score=score,
        think_markers="<" in text and (THINK_OPEN in text or THINK_CLOSE in text),
    )


def combined(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A multi-turn record's signals from its turns': any turn's flag, the highest score."""
    fired = {flag for turn in turns for flag in turn["flags"]}
    return {
        "flags": [name for name in FLAGS if name in fired],
        "repetition_score": max((turn["repetition_score"] for turn in turns), default=0.0),
    }
