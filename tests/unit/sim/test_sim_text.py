"""Seeded pseudo-text: token counts agree everywhere, output is deterministic, lengths follow the config."""

from __future__ import annotations

import statistics

from tokenmill.sim.text import (
    Degeneration,
    content_key,
    decode,
    estimate_tokens,
    plan_output,
    prompt_token_ids,
    render_chat,
)


def test_estimate_is_four_chars_per_token_and_never_zero() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000


def test_prompt_ids_have_one_id_per_estimated_token() -> None:
    for text in ("", "a", "hello world", "é" * 13, "x" * 999):
        assert len(prompt_token_ids(text)) == estimate_tokens(text)
    assert prompt_token_ids("same text") == prompt_token_ids("same text")


def test_output_text_reads_back_as_its_own_token_count() -> None:
    draft = plan_output(content_key(0, "p"), 500, ignore_eos=True, mean=100, sigma=0.5)
    assert len(draft.token_ids) == 500
    assert estimate_tokens(draft.text) == 500
    assert decode(draft.token_ids) == draft.text


def test_same_seed_and_prompt_give_the_same_output() -> None:
    a = plan_output(content_key(7, "prompt"), 4096, ignore_eos=False, mean=200, sigma=0.6)
    b = plan_output(content_key(7, "prompt"), 4096, ignore_eos=False, mean=200, sigma=0.6)
    c = plan_output(content_key(8, "prompt"), 4096, ignore_eos=False, mean=200, sigma=0.6)
    assert a == b
    assert a != c


def test_prompt_ids_and_text_give_different_keys() -> None:
    assert content_key(0, "1,2") != content_key(0, [1, 2])
    assert content_key(0, [1, 2]) == content_key(0, [1, 2])
    assert content_key(0, [1, 2], request_seed=1) != content_key(0, [1, 2])


def test_max_new_tokens_caps_with_finish_length() -> None:
    capped = plan_output(content_key(0, "x"), 3, ignore_eos=False, mean=1000, sigma=0.1)
    assert (len(capped.token_ids), capped.finish) == (3, "length")
    natural = plan_output(content_key(0, "x"), 100_000, ignore_eos=False, mean=20, sigma=0.1)
    assert natural.finish == "stop"
    assert 10 < len(natural.token_ids) < 40
    empty = plan_output(content_key(0, "x"), 0, ignore_eos=False, mean=20, sigma=0.1)
    assert (empty.token_ids, empty.text, empty.finish) == ([], "", "length")


def test_lengths_are_log_normal_around_the_mean() -> None:
    lengths = [
        len(plan_output(content_key(1, f"p{i}"), 1_000_000, ignore_eos=False, mean=300, sigma=0.6).token_ids)
        for i in range(3000)
    ]
    assert abs(statistics.fmean(lengths) - 300) < 20
    assert statistics.median(lengths) < statistics.fmean(lengths)  # right-skewed
    fixed = plan_output(content_key(1, "p"), 10_000, ignore_eos=False, mean=300, sigma=0.0)
    assert len(fixed.token_ids) == 300


def test_chat_rendering_keeps_roles_and_text_parts() -> None:
    text = render_chat(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
        ]
    )
    assert "system\nbe brief" in text
    assert "user\nhi" in text
    assert text.endswith("assistant\n")


def test_degenerate_answers_come_in_the_configured_shares_and_are_what_they_say() -> None:
    from tokenmill.config import SimSpec
    from tokenmill.quality.signals import signals
    from tokenmill.sim.text import degeneration, degeneration_rates

    cfg = SimSpec(loop_rate=0.05, empty_rate=0.02, unclosed_think_rate=0.03)
    kinds = [degeneration(content_key(0, f"p{i}"), degeneration_rates(cfg, penalized=False)) for i in range(20000)]
    rates: tuple[tuple[Degeneration, float], ...] = (("loop", 0.05), ("empty", 0.02), ("unclosed_think", 0.03))
    for kind, rate in rates:
        assert abs(kinds.count(kind) / len(kinds) - rate) < 0.006
    penalized = [degeneration(content_key(0, f"p{i}"), degeneration_rates(cfg, penalized=True)) for i in range(20000)]
    assert abs(penalized.count("loop") / len(penalized) - 0.005) < 0.002  # a penalty makes loops 10x rarer
    assert degeneration(content_key(0, "p"), degeneration_rates(SimSpec(), penalized=False)) is None

    cases: tuple[tuple[Degeneration, list[str]], ...] = (("loop", ["truncated", "repetition"]), ("empty", ["empty"]))
    for kind, flags in cases:
        d = plan_output(content_key(0, "q"), 600, ignore_eos=False, mean=200, sigma=0.6, degeneration=kind)
        assert decode(d.token_ids) == d.text
        assert signals(d.text, d.finish).flags() == flags
    think = plan_output(content_key(0, "q"), 600, ignore_eos=False, mean=200, sigma=0.6, degeneration="unclosed_think")
    assert think.text.startswith("<think>") and "</think>" not in think.text
    assert (len(think.token_ids), think.finish) == (600, "length")
    assert signals(think.text, think.finish).flags() == ["truncated", "no_answer", "think_markers"]


def test_normal_answers_are_not_flagged() -> None:
    from tokenmill.quality.signals import signals

    for i in range(300):
        d = plan_output(content_key(3, f"p{i}"), 100_000, ignore_eos=False, mean=300, sigma=0.6)
        assert signals(d.text, d.finish).flags() == []


def test_a_stop_string_cuts_after_the_thinking_tag_at_the_right_token() -> None:
    d = plan_output(content_key(0, "q"), 50, ignore_eos=False, mean=200, sigma=0.6, degeneration="unclosed_think")
    words = d.text.split()
    cut = plan_output(
        content_key(0, "q"), 50, ignore_eos=False, mean=200, sigma=0.6, degeneration="unclosed_think", stop=[words[2]]
    )
    assert cut.text == "<think> " + words[1] + " "
    assert len(cut.token_ids) == 3
