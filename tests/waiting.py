"""Waiting for a condition in tests: polled until it holds, within a deadline whose failure says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout: float = 60.0, every_s: float = 0.05) -> T:
    """``check()``'s first truthy value; an AssertionError naming ``what`` when none comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")
