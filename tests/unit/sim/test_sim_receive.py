"""The idle engine's receive window, driven with explicit times (no clock, no event loop)."""

from __future__ import annotations

import pytest

from tokenmill.sim.receive import (
    LAG_FACTOR,
    LAG_HALF_LIFE_S,
    MAX_QUIET_S,
    MAX_WINDOW_S,
    MIN_QUIET_S,
    HostLag,
    ReceiveWindow,
)

# beside two CPU hogs on two cores the requests of one burst reached the twin up to 30 ms apart, and its own
# timers ran up to ~10 ms late; on a quiet host 1-2 ms apart and 0.3 ms late
BUSY_SPREAD_S = 0.030
BUSY_LATENESS_S = 0.008


def busy_host(at: float = 100.0) -> HostLag:
    lag = HostLag()
    lag.observe(due=at - BUSY_LATENESS_S, woke=at)
    return lag


def quiet_host(at: float = 100.0) -> HostLag:
    lag = HostLag()
    lag.observe(due=at - 0.0003, woke=at)
    return lag


def test_on_a_busy_host_a_burst_spread_by_its_writer_lands_in_one_window() -> None:
    window = ReceiveWindow(opened=100.0)
    assert window.closes_at(busy_host()) > 100.0 + BUSY_SPREAD_S  # the last request of the burst is still in
    # each arrival keeps it open for another quiet span
    window.arrived(100.0 + BUSY_SPREAD_S)
    assert window.closes_at(busy_host()) == pytest.approx(
        100.0 + BUSY_SPREAD_S + LAG_FACTOR * BUSY_LATENESS_S, abs=0.001
    )


def test_on_a_quiet_host_the_window_is_short_and_a_later_request_opens_its_own() -> None:
    window = ReceiveWindow(opened=100.0)
    closes = window.closes_at(quiet_host())
    assert closes == pytest.approx(100.0 + MIN_QUIET_S)
    assert closes < 100.0 + BUSY_SPREAD_S


def test_a_late_wake_counts_for_a_while_then_fades() -> None:
    lag = busy_host(at=100.0)
    assert lag.at(100.0) == pytest.approx(BUSY_LATENESS_S)
    assert lag.at(100.0 + LAG_HALF_LIFE_S) == pytest.approx(BUSY_LATENESS_S / 2)
    assert lag.quiet_span(100.0 + 20 * LAG_HALF_LIFE_S) == MIN_QUIET_S
    # a smaller lateness seen later does not hide the larger one still counting
    lag.observe(due=100.5, woke=100.5001)
    assert lag.at(100.5) > BUSY_LATENESS_S / 2


def test_the_window_has_bounds_however_late_the_host_or_many_the_arrivals() -> None:
    lag = HostLag()
    lag.observe(due=99.0, woke=100.0)  # a wake a whole second late
    assert lag.quiet_span(100.0) == MAX_QUIET_S
    window = ReceiveWindow(opened=100.0)
    for i in range(1, 200):  # a request every 10 ms, for two seconds
        window.arrived(100.0 + i * 0.01)
    assert window.closes_at(lag) == pytest.approx(100.0 + MAX_WINDOW_S)
