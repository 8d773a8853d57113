"""The quality signals' table and what it drives: every signal is computed (a field of Signals, and an answer
that fires it), and every list of them (selectors, export's reasons, the help texts, the docs) is the table's."""

from __future__ import annotations

import dataclasses

from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.export import DROP_REASONS
from tokenmill.quality.records import parse_selectors
from tokenmill.quality.registry import DEGENERATE, FLAGS, SELECTORS, SIGNALS
from tokenmill.quality.signals import Signals, signals

# an answer that fires each signal, by name: a signal added to the table without one fails here
FIRES = {
    "truncated": ("a long answer", "length", None),
    "empty": ("   ", "stop", None),
    "no_answer": ("<think>I should work this out", "stop", None),
    "repetition": ("the cat sat on the mat. " * 120, "stop", None),
    "think_markers": ("<think>short</think>The answer is 4.", "stop", None),
}


def test_every_signal_is_a_field_of_signals_and_fires_on_an_answer_of_its_kind() -> None:
    fields = {f.name for f in dataclasses.fields(Signals)}
    assert set(FLAGS) <= fields
    assert set(FIRES) == set(FLAGS)
    for name, (text, finish, reasoning) in FIRES.items():
        assert name in signals(text, finish, reasoning).flags(), name


def test_the_selectors_are_the_signals_and_the_groups_each_with_a_reason() -> None:
    assert set(DROP_REASONS) == set(SELECTORS)
    assert parse_selectors(",".join(SELECTORS), "--drop") == SELECTORS
    assert set(DEGENERATE) == {s.name for s in SIGNALS if s.degenerate} and "truncated" not in DEGENERATE


def test_every_help_text_names_every_selector() -> None:
    runner = CliRunner()
    for command in (["export", "--help"], ["regenerate", "--help"], ["inspect", "--help"]):
        text = " ".join(runner.invoke(cli, command, terminal_width=200).output.split())
        missing = [s for s in SELECTORS if s not in text]
        assert not missing, f"{' '.join(command)} does not name {missing}"
