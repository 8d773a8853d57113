"""Records for tests: one place that knows every field, each test overriding what it cares about."""

from __future__ import annotations

import time
from typing import Any

from tokenmill.backends import Backend
from tokenmill.config import RetrySpec
from tokenmill.records import Completion, Failure
from tokenmill.run.dispatch import Dispatcher
from tokenmill.run.servers import ServerPool
from tokenmill.run.work import RecordMaker, Sink


def completion(rid: str, **fields: Any) -> Completion:
    """A completed prompt ``rid``; keyword arguments replace the defaults."""
    base: dict[str, Any] = {
        "id": rid,
        "prompt": "q",
        "completion": f"answer {rid}",
        "finish_reason": "stop",
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "model": "m",
        "sampling": {},
        "server": "http://127.0.0.1:1",
        "latency_s": 0.1,
        "attempts": 1,
        "started_at": 0.0,
        "finished_at": 0.1,
    }
    base.update(fields)
    return Completion(**base)


def failure(rid: str, **fields: Any) -> Failure:
    """A failed prompt ``rid``; keyword arguments replace the defaults."""
    base: dict[str, Any] = {
        "id": rid,
        "prompt": "q",
        "error_type": "PermanentError",
        "error": "rejected",
        "http_status": 400,
        "server": "http://127.0.0.1:1",
        "attempts": 1,
        "finished_at": 0.1,
    }
    base.update(fields)
    return Failure(**base)


def dispatcher(
    servers: list[str],
    backend: Backend,
    sink: Sink,
    retry: RetrySpec,
    concurrency: int,
    *,
    sampling: dict[str, object] | None = None,
    adaptive: bool = False,
    **kw: Any,
) -> Dispatcher:
    """A dispatcher over ``servers`` at ``concurrency`` each, stamping model ``m`` on its records."""
    pool = ServerPool(servers, concurrency, adaptive=adaptive)
    records = RecordMaker(model="m", sampling=sampling if sampling is not None else {}, wall=time.time)
    return Dispatcher(pool, backend, sink, retry, records, **kw)
