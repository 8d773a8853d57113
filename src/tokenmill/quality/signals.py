"""Signals of a degenerate answer, computed when its record is written (bounded work: the answer's tail only).

- ``truncated``: the answer hit ``max_tokens`` (finish reason ``length``).
- ``empty``: the answer is blank (whitespace only).
- ``no_answer``: the model reasoned (``reasoning_content``, or a ``<think>`` block) but gave no final answer,
  including a thinking block that never closes.
- ``repetition``: a loop at the end of the answer. Two views of the answer's tail, each strong where the other
  is blind: the share of word 4-grams that repeat an earlier one (a loop of sentences repeats nearly all of
  them; prose and code stay well below), and how well the tail compresses (a loop of characters without spaces
  compresses to almost nothing). Calibrated on prose and code that must not trip it (tests/unit/test_quality_*).
- ``answer_hash``: a hash of the answer (leading and trailing whitespace aside), to find the same answer given
  to different prompts across the corpus.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Any

PROBE = 32  # characters at the answer's end that a loop repeats a period earlier
TAILS = (600, 3000)  # characters of the answer's end looked at; a loop that fills either window is found
NGRAM = 4
MIN_NGRAMS = 40  # fewer words than this: too short to call a loop by repeated n-grams
LOOP_SCORE = 0.7  # a score at least this: a loop (prose stays below 0.3, library code below 0.5)
MIN_COMPRESS_BYTES = 256
WORDED_CHARS = 16  # a tail with fewer than one word per this many characters is checked by compression
LOOP_COMPRESS_RATIO = 0.08  # compressed/raw at most this scores LOOP_SCORE (prose and code stay above 0.2)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

FLAGS = ("truncated", "empty", "no_answer", "repetition")


@dataclass(frozen=True, slots=True)
class Signals:
    """What one answer shows; ``repetition_score`` is the stronger of the two loop views, 0 (none) to 1."""

    truncated: bool
    empty: bool
    no_answer: bool
    repetition: bool
    repetition_score: float
    answer_hash: str

    def flags(self) -> list[str]:
        """The names of the signals that fire, in :data:`FLAGS` order."""
        return [name for name in FLAGS if getattr(self, name)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "flags": self.flags(),
            "repetition_score": self.repetition_score,
            "answer_hash": self.answer_hash,
        }


def final_answer(text: str) -> tuple[str, bool]:
    """The answer after any thinking block, and whether a thinking block was left open."""
    start = text.find(THINK_OPEN)
    if start < 0:
        return text, False
    end = text.find(THINK_CLOSE, start)
    if end < 0:
        return "", True
    return text[end + len(THINK_CLOSE) :], False


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


def loop_score(answer: str) -> tuple[bool, float]:
    """Whether the answer ends in a loop, and the score (see the module docstring): the share of repeated
    4-grams, or for text not spelled in words (few spaces: a run of symbols, a script written without spaces)
    the compression ratio mapped onto the same scale (``LOOP_COMPRESS_RATIO`` scores ``LOOP_SCORE``).

    First a probe that costs a microsecond: a loop's last characters occur once more a period earlier, so an
    answer whose last :data:`PROBE` characters appear nowhere else in the window does not end in a loop (score
    0), and most answers stop there."""
    end = answer.rstrip()
    window = end[-TAILS[-1] :]
    probe = window[-PROBE:]
    if len(window) < 2 * PROBE or window.find(probe) >= len(window) - PROBE:
        return False, 0.0
    score = 0.0
    for size in TAILS:
        tail = end[-size:]
        words = tail.split()
        score = max(score, ngram_share(words))
        if len(words) * WORDED_CHARS < len(tail):
            ratio = compress_ratio(tail)
            if ratio is not None:
                score = max(score, 1.0 - (1.0 - LOOP_SCORE) * ratio / LOOP_COMPRESS_RATIO)
        if score >= LOOP_SCORE or len(end) <= size:
            break
    return score >= LOOP_SCORE, round(score, 3)


def answer_hash(answer: str) -> str:
    """A 64-bit hash of the answer without leading and trailing whitespace (equal answers, equal hashes)."""
    return hashlib.sha256(answer.strip().encode("utf-8", "replace")).hexdigest()[:16]


def signals(text: str, finish_reason: str | None, reasoning: str | None = None) -> Signals:
    """The signals of one generated answer (``text`` as returned, ``reasoning`` when the server split it off)."""
    answer, unclosed = final_answer(text)
    blank = not answer.strip()
    reasoned = unclosed or bool(reasoning and reasoning.strip()) or THINK_OPEN in text
    looping, score = loop_score(answer if answer.strip() else text)
    return Signals(
        truncated=finish_reason == "length",
        empty=blank and not reasoned,
        no_answer=reasoned and blank,
        repetition=looping,
        repetition_score=score,
        answer_hash=answer_hash(answer),
    )


def combined(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A multi-turn record's signals from its turns': any turn's flag, the highest score, the last answer's
    hash (the record's ``completion`` is the last turn's answer)."""
    fired = {flag for turn in turns for flag in turn["flags"]}
    return {
        "flags": [name for name in FLAGS if name in fired],
        "repetition_score": max((turn["repetition_score"] for turn in turns), default=0.0),
        "answer_hash": turns[-1]["answer_hash"] if turns else answer_hash(""),
    }
