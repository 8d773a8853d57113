"""Quality signals per answer: loops are found, normal prose and code are not flagged, the other signals fire
exactly when they should."""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenmill.quality.signals import LOOP_SCORE, answer_hash, combined, loop_score, signals

ROOT = Path(__file__).resolve().parents[3]
CHUNK = 4000  # characters per sample answer: a typical long answer


def _chunks(text: str) -> Iterator[str]:
    for i in range(0, len(text), CHUNK):
        chunk = text[i : i + CHUNK]
        if chunk.strip():
            yield chunk


def prose_samples() -> list[str]:
    """English prose: the Python documentation's topic pages (shipped with the interpreter) and this project's
    own documentation."""
    from pydoc_data.topics import topics

    texts = list(topics.values())
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    texts += [(ROOT / name).read_text() for name in ("README.md", "ARCHITECTURE.md")]
    return [c for t in texts for c in _chunks(t)]


def code_samples() -> list[str]:
    """Python code: the standard library's modules (not its tests, which hold generated tables) and this
    project's source."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [p for p in sorted(stdlib.glob("*.py"))]
    paths += sorted((stdlib / "asyncio").glob("*.py")) + sorted((stdlib / "email").glob("*.py"))
    paths += sorted((ROOT / "src" / "tokenmill").rglob("*.py"))
    out = []
    for p in paths:
        try:
            out += list(_chunks(p.read_text()))
        except (OSError, UnicodeDecodeError):
            continue
    return out


def loops(rng: random.Random) -> list[str]:
    """Answers that end in a loop, in the shapes models loop in: a sentence, a short phrase, a long paragraph,
    a run of symbols, a script without spaces, after a normal beginning or from the start."""
    prose = prose_samples()
    out = []
    for i in range(200):
        start = rng.choice(prose)[: rng.randrange(0, 3000)]
        words = rng.choice(prose).split()
        at = rng.randrange(max(1, len(words) - 60))
        unit = " ".join(words[at : at + rng.choice([3, 8, 20, 50])]) + " "
        shape = i % 4
        if shape == 1:
            unit = rng.choice(["=", "-=", "**", "|---", "0"]) * rng.randint(1, 3)
        elif shape == 2:
            unit = rng.choice(["我不知道答案。", "これは問題です。", "그래서 답은 "])
        out.append(start + unit * (3200 // len(unit) + 1))
    return out


def test_normal_prose_is_never_flagged() -> None:
    samples = prose_samples()
    assert len(samples) > 150
    flagged = [(loop_score(s)[1], s[:80]) for s in samples if loop_score(s)[0]]
    assert flagged == []


def test_normal_code_is_never_flagged() -> None:
    samples = code_samples()
    assert len(samples) > 1000
    flagged = [(loop_score(s)[1], s[:80]) for s in samples if loop_score(s)[0]]
    assert flagged == []


def test_loops_are_found() -> None:
    cases = loops(random.Random(7))
    missed = [c[-120:] for c in cases if not loop_score(c)[0]]
    assert missed == []
    assert min(loop_score(c)[1] for c in cases) >= LOOP_SCORE


def test_a_loop_longer_than_the_window_of_its_answer_is_found_at_the_end_only() -> None:
    normal = " ".join(prose_samples()[:3])
    assert not loop_score(normal)[0]
    assert loop_score(normal + " and then I check again." * 40)[0]
    assert not loop_score("and then I check again. " * 40 + normal)[0]  # a repeat early on is not a loop


@pytest.mark.parametrize(
    ("text", "finish", "reasoning", "flags"),
    [
        ("The answer is 4.", "stop", None, []),
        ("The answer is 4.", "length", None, ["truncated"]),
        ("", "stop", None, ["empty"]),
        ("  \n\t ", "stop", None, ["empty"]),
        ("", "stop", "Let me think about this.", ["no_answer"]),
        ("<think>Let me think.</think>\n\n", "stop", None, ["no_answer", "think_markers"]),
        ("<think>Let me think. And think more", "length", None, ["truncated", "no_answer", "think_markers"]),
        ("<think>Let me think.</think>The answer is 4.", "stop", None, ["think_markers"]),  # inline: no parser
        ("Let me think.</think>The answer is 4.", "stop", None, ["think_markers"]),  # the template opened the block
        ("Let me think.</think>\n", "stop", None, ["no_answer", "think_markers"]),
        ("The answer is 4.", "stop", "Two and two.", []),
    ],
)
def test_signals(text: str, finish: str, reasoning: str | None, flags: list[str]) -> None:
    assert signals(text, finish, reasoning).flags() == flags


def test_a_thinking_block_that_loops_without_closing_is_both_no_answer_and_repetition() -> None:
    s = signals("<think>" + "Wait, let me recount. " * 200, "length")
    assert s.flags() == ["truncated", "no_answer", "repetition", "think_markers"]


def test_equal_answers_hash_alike_whatever_whitespace_surrounds_them() -> None:
    assert answer_hash("a b\nc \n") == answer_hash(" a b\nc")
    assert answer_hash("a b c") != answer_hash("a b d")
    assert len(answer_hash("x")) == 16


def test_a_multi_turn_record_has_any_turn_flag_and_the_highest_score() -> None:
    turns = [signals("x " * 3 + "loop " * 400, "length").as_dict(), signals("fine", "stop").as_dict()]
    both = combined(turns)
    assert both == {"flags": ["truncated", "repetition"], "repetition_score": turns[0]["repetition_score"]}


def test_the_signals_written_with_a_completion_hold_no_whole_answer_hash() -> None:
    """The duplicate hash is the corpus reader's (tokenmill.quality.records.answer_digest): the writer's signals
    look at the answer's tail only."""
    assert set(signals("An answer. " * 300, "stop").as_dict()) == {"flags", "repetition_score"}
