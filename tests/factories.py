"""Records for tests: one place that knows every field, each test overriding what it cares about."""

from __future__ import annotations

from typing import Any

from tokenmill.records import Completion, Failure


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
