"""No negative durations anywhere: a time already past reads 0s (the status line once said "measuring in -2s":
autotune's warm-up was over, the next scrape round had not come yet)."""

from __future__ import annotations

from tests.helpers.autotune import ScriptedFleet, drive, tuned
from tokenmill.autotune.loop import Phase
from tokenmill.fmt import duration


def test_a_duration_in_the_past_reads_zero() -> None:
    assert duration(-2.4) == "0s" and duration(-7200.0) == "0s"
    assert duration(0.0) == "0s" and duration(67.0) == "1m07s"


def test_autotune_between_the_end_of_its_warm_up_and_the_next_round_says_0s_not_a_negative_time() -> None:
    fleet = ScriptedFleet(factor=2.5)
    tuner, _ = tuned(fleet)
    for _ in range(200):
        drive(fleet, tuner, 1)
        if tuner.phase is Phase.WARMUP:
            break
    assert tuner.phase is Phase.WARMUP
    fleet.t += 60.0  # the warm-up ended a minute ago; no round has looked since
    line = tuner.status()
    assert line is not None and "measuring in 0s" in line and "-" not in line.split("measuring in")[1]
