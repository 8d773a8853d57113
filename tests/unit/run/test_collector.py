"""The run's garbage-collector settings: the young threshold grows with the in-flight bound, and every setting
comes back when the last run ends."""

from __future__ import annotations

import gc

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, prompts, retry
from tokenmill.run.collector import RUN_GC_THRESHOLDS, YOUNG_PER_REQUEST, collect_less, thresholds


def test_the_young_threshold_grows_with_the_requests_in_flight_never_below_its_floor() -> None:
    assert thresholds() == RUN_GC_THRESHOLDS
    assert thresholds(16) == RUN_GC_THRESHOLDS  # a small run collects as often as before
    young, *rest = thresholds(1024)
    assert young == 1024 * YOUNG_PER_REQUEST > RUN_GC_THRESHOLDS[0]
    assert tuple(rest) == RUN_GC_THRESHOLDS[1:]


def test_nested_runs_restore_the_thresholds_in_force_before_the_first() -> None:
    before = gc.get_threshold()
    with collect_less(1024):
        assert gc.get_threshold() == thresholds(1024)
        with collect_less(8):
            assert gc.get_threshold() == thresholds(8)
        assert gc.get_freeze_count() > 0  # still inside a run: what existed stays frozen
    assert gc.get_threshold() == before


async def test_a_run_collects_by_its_in_flight_bound() -> None:
    seen: list[tuple[int, int, int]] = []
    backend = ScriptedBackend(lambda s, p, b: seen.append(gc.get_threshold()))
    d = factories.dispatcher(["http://a", "http://b"], backend, Sink(), retry(), 300, sampling={"max_tokens": 8})
    assert await d.run(prompts(3))
    assert seen and set(seen) == {thresholds(600)}  # 300 a server, two servers
