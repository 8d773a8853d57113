"""The store driver's event loop: a request task that failed after its operation had (the store went away
under an upload) is one debug line, never an asyncio "Task exception was never retrieved" traceback.

Regression: during a store outage the upload's aiohttp body writer (``Expect: 100-continue``) failed after
the put had already failed and been retried, and asyncio printed its traceback into the run's output.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from tokenmill.storage.store import Store


def s3_loop() -> asyncio.AbstractEventLoop:
    store = Store("s3://bucket/prefix/", {"endpoint_url": "http://127.0.0.1:9"})  # nothing is contacted
    loop = getattr(store._fs, "loop", None)
    assert isinstance(loop, asyncio.AbstractEventLoop)
    return loop


def report(loop: asyncio.AbstractEventLoop, exc: BaseException) -> None:
    loop.call_exception_handler({"message": "Task exception was never retrieved", "exception": exc})


def test_a_lost_connection_nobody_retrieved_is_a_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    loop = s3_loop()
    caplog.set_level(logging.DEBUG)
    report(loop, aiohttp.ClientConnectionResetError("Cannot write to closing transport"))
    report(loop, ConnectionResetError(104, "Connection reset by peer"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    quiet = [r for r in caplog.records if r.name == "tokenmill.storage.store"]
    assert len(quiet) == 2 and all(r.exc_info is None for r in quiet)
    assert "Cannot write to closing transport" in quiet[0].getMessage()


def test_any_other_unretrieved_error_still_reaches_the_default_handler(caplog: pytest.LogCaptureFixture) -> None:
    loop = s3_loop()
    report(loop, ValueError("a bug"))
    errors = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
