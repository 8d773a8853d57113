"""The watchdog's decision, on a fake clock with scripted probes and metrics: misses in a row, not one slow answer;
a counter that stops while requests run, not an idle server nor one that is busy generating."""

from __future__ import annotations

from tokenmill.config import WatchdogSpec
from tokenmill.fleet.watchdog import Reading, Watchdog


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def dog(spec: WatchdogSpec, answers: list[bool], readings: list[Reading | None]) -> tuple[Watchdog, Clock]:
    clock = Clock()

    def probe(url: str, timeout: float) -> bool:
        assert url == "http://s:1/health" and timeout == spec.probe_timeout_s
        return answers.pop(0) if answers else True

    def read(url: str, timeout: float) -> Reading | None:
        return readings.pop(0) if readings else None

    return Watchdog(spec, "http://s:1", "/health", clock=clock, probe=probe, read=read), clock


def looks(w: Watchdog, clock: Clock, n: int, step: float) -> list[str | None]:
    out = []
    for _ in range(n):
        clock.t += step
        out.append(w.check())
    return out


def test_probe_misses_in_a_row_make_a_hang_but_one_slow_answer_does_not() -> None:
    spec = WatchdogSpec(interval_s=1, probe_timeout_s=2, probe_failures=3, stall_s=0)
    w, clock = dog(spec, [False, False, True, False, False, False], [])
    got = looks(w, clock, 6, 1.0)
    assert got[:5] == [None] * 5  # two misses, an answer (the count starts again), two misses
    assert got[5] is not None and "no answer 3 times in a row" in got[5]


def test_looks_are_taken_once_per_interval() -> None:
    spec = WatchdogSpec(interval_s=10, probe_failures=1, stall_s=0)
    w, clock = dog(spec, [False], [])
    assert looks(w, clock, 9, 1.0) == [None] * 9  # not due yet: the probe is not even asked
    assert looks(w, clock, 1, 1.0)[0] is not None


def test_a_counter_that_stops_while_requests_run_is_a_hang() -> None:
    spec = WatchdogSpec(interval_s=5, stall_s=30)
    readings: list[Reading | None] = [Reading(4, 100), Reading(4, 150), *[Reading(4, 150)] * 7]
    w, clock = dog(spec, [], readings)
    got = looks(w, clock, 9, 5.0)
    # the counter last moved at t=10; at t=40 it has been still for 30 s with requests running
    assert got[:7] == [None] * 7 and got[7] is not None and "generated nothing for 30 s" in got[7]


def test_an_idle_server_and_a_busy_one_are_not_hung() -> None:
    spec = WatchdogSpec(interval_s=5, stall_s=10)
    idle = [Reading(0, 100)] * 10  # nothing running: a still counter means nothing
    busy = [Reading(8, 100 + 10 * i) for i in range(10)]  # generating
    unknown = [None, Reading(None, 5), Reading(3, None)] * 4  # unreadable metrics say nothing either way
    for readings in (idle, busy, unknown):
        w, clock = dog(spec, [], list(readings))
        assert looks(w, clock, 10, 5.0) == [None] * 10


def test_requests_stopping_resets_the_stall_clock() -> None:
    spec = WatchdogSpec(interval_s=5, stall_s=12)
    readings: list[Reading | None] = [Reading(2, 7), Reading(2, 7), Reading(0, 7), *[Reading(2, 7)] * 4]
    w, clock = dog(spec, [], readings)
    got = looks(w, clock, 7, 5.0)
    # still since t=5, but idle at t=15: busy again from t=20, so hung at t=35, not at t=20
    assert got[:6] == [None] * 6 and got[6] is not None and "for 15 s" in got[6]


def test_a_server_whose_counter_moves_is_never_killed_however_many_probes_it_misses() -> None:
    """On a busy machine a busy server misses its health probes: its token counter moving says it works."""
    spec = WatchdogSpec(interval_s=5, probe_timeout_s=2, probe_failures=3, stall_s=300)
    moving: list[Reading | None] = [Reading(64, 1000 + 500 * i) for i in range(20)]
    w, clock = dog(spec, [False] * 20, moving)
    assert looks(w, clock, 20, 5.0) == [None] * 20
    assert w.misses == 0 and w.busy_misses == 19  # every miss after the first reading was a busy one
    still: list[Reading | None] = [Reading(64, 1000)] * 4  # the same misses with a counter that stands still: hung
    w, clock = dog(spec, [False] * 4, still)
    got = looks(w, clock, 4, 5.0)
    assert got[:2] == [None, None] and got[2] is not None and "token counter did not move" in got[2]


def test_a_server_that_misses_its_probes_with_unreadable_metrics_is_still_hung() -> None:
    spec = WatchdogSpec(interval_s=5, probe_failures=3, stall_s=0)
    w, clock = dog(spec, [False] * 3, [None, None, None])
    assert looks(w, clock, 3, 5.0)[2] is not None
