"""Waiting for a condition in tests: polled until it holds, within a deadline, optionally while a process must live.

``wait_for`` and ``wait_for_async`` call (or await) ``check`` until ``done(value)`` holds (by default: the value
is truthy) and return that value. Past the deadline they fail with what was awaited and the last value seen. Given
``alive=proc`` (anything with ``poll()``, e.g. a ``subprocess.Popen``), they fail as soon as that process has
exited, with its exit code and the tail of its log (``log=path``, or what it wrote to a pipe), instead of
waiting out the deadline. The clock and the pause are injectable, so the waiting itself is tested without time.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_EVERY_S = 0.05
TAIL_CHARS = 2000  # of a dead process's log, in the failure message
VALUE_CHARS = 500  # of the last value seen, in the timeout message
PIPE_READ_S = 5.0  # reading what a dead process left in its pipes (a grandchild may hold them open)


class Watched(Protocol):
    """A process being watched: ``poll()`` is None while it runs, its exit code once it has ended."""

    def poll(self) -> int | None: ...


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data if isinstance(data, str) else ""


def log_tail(log: Path) -> str:
    """The last part of the text file ``log`` (or why there is none)."""
    try:
        return log.read_text(errors="replace")[-TAIL_CHARS:] or "(empty log)"
    except OSError as exc:
        return f"(log {log} unreadable: {exc})"


def output_tail(proc: Watched, log: Path | None = None) -> str:
    """The last of what an ended process wrote: ``log``'s tail, or else what is left in its stdout/stderr pipes."""
    if log is not None:
        return log_tail(log)
    if isinstance(proc, subprocess.Popen) and (proc.stdout is not None or proc.stderr is not None):
        try:
            out, err = proc.communicate(timeout=PIPE_READ_S)
        except (subprocess.TimeoutExpired, ValueError, OSError) as exc:
            return f"(its output could not be read: {exc})"
        text = (_text(out) + _text(err)).strip()
        return text[-TAIL_CHARS:] or "(no output)"
    return "(no log kept)"


class _Poll:
    """The state of one wait: its deadline, the last value seen, the process that must stay alive."""

    def __init__(
        self, what: str, timeout: float, alive: Watched | None, log: Path | None, clock: Callable[[], float]
    ) -> None:
        self.what, self.timeout, self.alive, self.log, self.clock = what, timeout, alive, log, clock
        self.end = clock() + timeout
        self.last: object = None
        self.seen = False

    def watch(self) -> None:
        """Fail at once if the watched process has ended."""
        if self.alive is None:
            return
        code = self.alive.poll()
        if code is not None:
            last = f"; last value: {_short(self.last)}" if self.seen else ""
            raise AssertionError(
                f"the process waited on exited with code {code} before {self.what}{last}\n"
                f"--- its output, last part ---\n{output_tail(self.alive, self.log)}"
            )

    def settled(self, value: object, done: Callable[[Any], object]) -> bool:
        self.last, self.seen = value, True
        return bool(done(value))

    def expire(self) -> None:
        """Fail if the deadline has passed."""
        if self.clock() >= self.end:
            last = _short(self.last)
            tail = f"\n--- the log, last part ---\n{log_tail(self.log)}" if self.log is not None else ""
            raise AssertionError(
                f"timed out after {self.timeout:g} s waiting for {self.what}; last value: {last}{tail}"
            )


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    every_s: float = DEFAULT_EVERY_S,
    *,
    done: Callable[[T], object] = bool,
    alive: Watched | None = None,
    log: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``check()``'s first value for which ``done`` holds; an AssertionError naming ``what`` (and the last value
    seen) when none comes within ``timeout``, or as soon as ``alive`` has exited."""
    poll = _Poll(what, timeout, alive, log, clock)
    while True:
        poll.watch()
        value = check()
        if poll.settled(value, done):
            return value
        poll.expire()
        sleep(every_s)


async def wait_for_async(
    what: str,
    check: Callable[[], Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT_S,
    every_s: float = DEFAULT_EVERY_S,
    *,
    done: Callable[[T], object] = bool,
    alive: Watched | None = None,
    log: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """:func:`wait_for` on an event loop: ``check`` is awaited (a coroutine function), so is the pause."""
    poll = _Poll(what, timeout, alive, log, clock)
    while True:
        poll.watch()
        value = await check()
        if poll.settled(value, done):
            return value
        poll.expire()
        await sleep(every_s)


def wait_for_match(
    what: str, path: Path, pattern: str, timeout: float = DEFAULT_TIMEOUT_S, *, alive: Watched | None = None
) -> re.Match[str]:
    """The first match of ``pattern`` in the text file at ``path``, once it exists (a log line a process writes)."""

    def check() -> re.Match[str] | None:
        return re.search(pattern, path.read_text()) if path.exists() else None

    found = wait_for(what, check, timeout, alive=alive, log=path)
    assert found is not None  # wait_for returns only a value its ``done`` (here: truthy) accepts
    return found
