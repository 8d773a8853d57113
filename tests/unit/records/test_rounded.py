"""``records.rounded``: what a record writes of a time or a latency, at a third of ``round()``'s cost."""

from __future__ import annotations

import random

import orjson
import pytest

from tokenmill.records import rounded


@pytest.mark.parametrize("digits", [0, 3, 4])
def test_rounded_agrees_with_round_and_writes_as_few_digits(digits: int) -> None:
    rng = random.Random(digits)
    values = [rng.uniform(0, 5000) for _ in range(2000)]  # latencies
    if digits <= 3:
        values += [rng.uniform(1.6e9, 1.9e9) for _ in range(2000)]  # times since the epoch, in milliseconds
    for x in values:
        got = rounded(x, digits)
        assert abs(got - round(x, digits)) <= 10**-digits * (1 + 1e-9)  # at most a tie apart
        assert abs(got - x) <= 10**-digits / 2 * (1 + 1e-6)
        text = orjson.dumps(got).decode()  # what the record holds: no 0.30000000000000004
        decimals = text.split(".")[1] if "." in text else ""
        assert len(decimals.rstrip("0")) <= max(digits, 1), (x, text)


def test_rounded_ties_round_up() -> None:
    assert rounded(0.5, 0) == 1.0
    assert rounded(2.5, 0) == 3.0  # round() gives 2 (to even); a record's times never care
    assert rounded(1.25, 1) == 1.3
    assert rounded(1767000000.1234, 3) == 1767000000.123
