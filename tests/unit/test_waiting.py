"""tests/waiting.py: a condition met, a timeout that says what was awaited and what was seen, a watched process
that dies; on an injected clock whose pauses advance it (nothing here sleeps)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_for, wait_for_async


class Clock:
    """Time that passes only when the waiter pauses."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Proc:
    """A process that runs for ``polls`` polls, then has exited with ``code``."""

    def __init__(self, polls: int, code: int = 3) -> None:
        self.left, self.code = polls, code

    def poll(self) -> int | None:
        if self.left > 0:
            self.left -= 1
            return None
        return self.code


def values(*seq: int) -> Iterator[int]:
    yield from seq
    while True:
        yield seq[-1]


def test_the_first_value_that_holds_is_returned_after_as_many_pauses_as_failed_checks() -> None:
    clock, seen = Clock(), values(0, 0, 0, 7)
    assert wait_for("seven", lambda: next(seen), timeout=10, every_s=0.5, clock=clock, sleep=clock.sleep) == 7
    assert clock.pauses == [0.5, 0.5, 0.5]


def test_done_decides_when_a_value_is_enough() -> None:
    clock, seen = Clock(), values(1, 2, 3, 4)
    got = wait_for("three or more", lambda: next(seen), done=lambda v: v >= 3, clock=clock, sleep=clock.sleep)
    assert got == 3 and len(clock.pauses) == 2


def test_a_timeout_names_what_was_awaited_and_the_last_value_seen() -> None:
    clock, seen = Clock(), values(1, 2, 3, 4, 5)
    with pytest.raises(AssertionError) as err:
        wait_for("ten shards", lambda: next(seen), timeout=2, every_s=0.5, done=lambda v: v >= 10,
                 clock=clock, sleep=clock.sleep)  # fmt: skip
    assert str(err.value) == "timed out after 2 s waiting for ten shards; last value: 5"
    assert clock.now == 102.0  # checked at 100, 100.5, ... and once more at the deadline, then failed


def test_the_condition_is_checked_once_even_when_the_deadline_has_passed() -> None:
    clock = Clock()
    assert wait_for("ready", lambda: "yes", timeout=0, clock=clock, sleep=clock.sleep) == "yes"
    assert clock.pauses == []


def test_a_watched_process_that_dies_fails_at_once_with_its_exit_code_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("starting\n" + "x" * 5000 + "\nTraceback: the run crashed\n")
    clock, seen = Clock(), values(0, 1)
    with pytest.raises(AssertionError) as err:
        wait_for("two shards", lambda: next(seen), timeout=60, every_s=1, done=lambda v: v >= 2,
                 alive=Proc(polls=2, code=3), log=log, clock=clock, sleep=clock.sleep)  # fmt: skip
    message = str(err.value)
    assert message.startswith("the process waited on exited with code 3 before two shards; last value: 1\n")
    assert message.endswith("Traceback: the run crashed\n") and "starting" not in message  # the tail only
    assert clock.now == 102.0  # two pauses, not the 60 s deadline


def test_a_process_that_has_died_fails_the_wait_even_if_the_condition_holds() -> None:
    clock = Clock()
    with pytest.raises(AssertionError, match="exited with code 0 before the kill point"):
        wait_for("the kill point", lambda: True, alive=Proc(polls=0, code=0), clock=clock, sleep=clock.sleep)


def test_a_dead_process_shows_what_it_left_in_its_pipe() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('no servers answered'); sys.exit(4)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc.wait(timeout=60)
    clock = Clock()
    with pytest.raises(AssertionError) as err:
        wait_for("the first record", lambda: False, alive=proc, clock=clock, sleep=clock.sleep)
    assert "exited with code 4 before the first record" in str(err.value)
    assert str(err.value).endswith("no servers answered")


def test_the_async_form_awaits_its_check_and_times_out_the_same_way() -> None:
    clock, seen = Clock(), values(0, 0, 9)

    async def probe() -> int:
        return next(seen)

    async def scenario() -> None:
        got: int = await wait_for_async("nine", probe, every_s=0.25, clock=clock, sleep=clock.asleep)
        assert got == 9 and clock.pauses == [0.25, 0.25]
        with pytest.raises(AssertionError, match=r"timed out after 1 s waiting for ten; last value: 9$"):
            await wait_for_async("ten", probe, 1, done=lambda v: v == 10, clock=clock, sleep=clock.asleep)

    asyncio.run(scenario())


def test_the_async_form_watches_a_process_too() -> None:
    clock = Clock()

    async def empty() -> int:
        return 0

    async def scenario() -> None:
        with pytest.raises(AssertionError, match="exited with code 9 before the queue"):
            await wait_for_async("the queue", empty, alive=Proc(polls=1, code=9), clock=clock, sleep=clock.asleep)

    asyncio.run(scenario())
    assert clock.pauses == [0.05]
