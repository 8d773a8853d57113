"""The quality signals and selectors, one row each: every list of them (flags, degenerate, selectors, help texts,
export's reasons, the docs' table) is read from :data:`SIGNALS` and :data:`GROUPS`.

A new signal is a row here and its computation in :func:`tokenmill.quality.signals.signals` (a field of
:class:`~tokenmill.quality.signals.Signals` of the same name; a test ties the two).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SignalDef:
    """One signal of a written answer."""

    name: str  # the flag in the record's ``quality.flags``
    fires: str  # when it fires, in the docs' words (markdown)
    reason: str  # why export left a record out, in its counts
    hint: str = ""  # a few words after the name in the help texts, when the name alone does not say it
    degenerate: bool = False  # waste to train on (``--drop degenerate``)
    examples: bool = True  # the worst records are shown (a truncated answer alone is no defect to show)


@dataclass(frozen=True, slots=True)
class GroupDef:
    """A selector beyond a single signal (``export --drop``, ``regenerate --where``)."""

    name: str
    reason: str
    hint: str


SIGNALS: tuple[SignalDef, ...] = (
    SignalDef("truncated", "the finish reason is `length` (the answer hit `max_tokens`)",
              "truncated (finish_reason length)", examples=False),
    SignalDef("empty", "the answer is blank", "empty completion", degenerate=True),
    SignalDef("no_answer", "the model reasoned (`reasoning_content`, or a `<think>` block in the text) but gave no "
              "final answer, including a thinking block that never closes",
              "reasoning without a final answer", degenerate=True),
    SignalDef("repetition", "the answer ends in a loop", "repetition (a loop at the answer's end)", degenerate=True),
    SignalDef("think_markers", "a thinking marker (`<think>` or `</think>`) is left in the answer as returned: the "
              "server gave the reasoning back inline (no `--reasoning-parser`, or a completion API). A thinking "
              "template would train the drafter on the markers; SpecForge's regeneration rejects such rows",
              "think markers (<think>, </think>) left in the answer", hint="<think> markers left in the answer"),
)  # fmt: skip

FLAGS: tuple[str, ...] = tuple(s.name for s in SIGNALS)
DEGENERATE: tuple[str, ...] = tuple(s.name for s in SIGNALS if s.degenerate)
"""Signals that make an answer waste to train on (``truncated`` alone may be a long, good answer)."""
EXAMPLE_FLAGS: tuple[str, ...] = tuple(s.name for s in SIGNALS if s.examples)


def _or(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


GROUPS: tuple[GroupDef, ...] = (
    GroupDef("degenerate", "degenerate (loop, empty or no final answer)", _or(DEGENERATE)),
    GroupDef("duplicate", "duplicate (an answer an earlier record already gave)", "later copies of an answer"),
)
ROWS: tuple[SignalDef | GroupDef, ...] = (*SIGNALS, *GROUPS)
SELECTORS: tuple[str, ...] = tuple(row.name for row in ROWS)
"""What ``export --drop`` and ``regenerate --where`` accept."""
REASONS: dict[str, str] = {row.name: row.reason for row in ROWS}
"""Why a record was left out, per selector (export's counts)."""


def group(name: str) -> GroupDef:
    """The group selector called ``name``."""
    return next(g for g in GROUPS if g.name == name)


def selectors_help() -> str:
    """The selectors for a help text: ``truncated, empty, ..., degenerate (empty, no_answer or repetition), ...``."""
    return ", ".join(f"{row.name} ({row.hint})" if row.hint else row.name for row in ROWS)
