"""The dispatch loop against a scripted backend (the one-method seam), no network."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, prompts, retry
from tokenmill.backends.base import Backend
from tokenmill.errors import MisconfiguredError, PermanentError, ServerError, ServerFault, TransientError
from tokenmill.records import Prompt
from tokenmill.run.dispatch import Dispatcher


def make(servers: list[str], backend: Backend, sink: Sink, concurrency: int = 4, **kw: Any) -> Dispatcher:
    return factories.dispatcher(
        servers, backend, sink, retry(**kw.pop("retry", {})), concurrency, sampling={"max_tokens": 8}, **kw
    )


async def test_every_prompt_completed_exactly_once_within_limits() -> None:
    backend = ScriptedBackend(lambda s, p, b: None)
    sink = Sink()
    d = make(["http://a", "http://b", "http://c"], backend, sink, concurrency=5)
    assert await d.run(prompts(300))
    ids = [c.id for c in sink.done]
    assert sorted(ids, key=int) == [str(i) for i in range(300)]
    assert not sink.failed
    assert all(peak <= 5 for peak in backend.peak.values())
    # least-loaded choice spreads the work over every server
    per_server = Counter(s for s, _ in backend.calls)
    assert set(per_server) == {"http://a", "http://b", "http://c"}
    assert min(per_server.values()) > 50
    rec = sink.done[0]
    assert rec.completion_tokens == 5 and rec.attempts == 1 and rec.sampling == {"max_tokens": 8}


async def test_transient_errors_retry_on_another_server() -> None:
    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if server == "http://bad":
            return TransientError("HTTP 500: boom", status=500, server=server)
        return None

    backend = ScriptedBackend(script)
    sink = Sink()
    d = make(["http://bad", "http://good"], backend, sink, concurrency=2, retry={"quarantine_after": 1000})
    assert await d.run(prompts(40))
    assert len(sink.done) == 40 and not sink.failed
    assert all(c.server == "http://good" for c in sink.done)
    retried = [c for c in sink.done if c.attempts > 1]
    assert retried, "some prompts went to the bad server first"
    assert d.stats.retries == sum(c.attempts - 1 for c in sink.done)


async def test_permanent_error_is_recorded_not_retried() -> None:
    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if p.id == "7":
            return PermanentError("HTTP 400: prompt is too long", status=400, server=server)
        return None

    backend = ScriptedBackend(script)
    sink = Sink()
    d = make(["http://a"], backend, sink)
    assert await d.run(prompts(20))
    assert [f.id for f in sink.failed] == ["7"]
    failure = sink.failed[0]
    assert failure.http_status == 400 and "too long" in failure.error and failure.attempts == 1
    assert sum(1 for _, pid in backend.calls if pid == "7") == 1
    assert len(sink.done) == 19


async def test_attempts_exhausted_gives_failure_with_last_error() -> None:
    backend = ScriptedBackend(lambda s, p, b: TransientError("HTTP 500: always", status=500, server=s))
    sink = Sink()
    d = make(["http://a", "http://b"], backend, sink, retry={"max_attempts": 3, "quarantine_after": 10_000})
    assert await d.run(prompts(5))
    assert len(sink.failed) == 5 and not sink.done
    assert all(f.attempts == 3 and f.error_type == "TransientError" for f in sink.failed)


async def test_server_faults_do_not_use_up_attempts_and_quarantine_recovers() -> None:
    state = {"down": True}
    probes: list[str] = []

    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if state["down"]:
            return ServerFault("connection failed: refused", server=server)
        return None

    async def probe(session: aiohttp.ClientSession, url: str) -> bool:
        probes.append(url)
        if len(probes) >= 3:
            state["down"] = False
        return not state["down"]

    backend = ScriptedBackend(script)
    sink = Sink()
    d = make(["http://a"], backend, sink, probe=probe, retry={"max_attempts": 2, "quarantine_after": 2})
    assert await d.run(prompts(10))
    # the server was down for a while: nothing was marked failed, everything completed once it came back
    assert not sink.failed
    assert sorted(c.id for c in sink.done) == sorted(str(i) for i in range(10))
    assert len(probes) >= 3
    assert d.servers[0].usable


async def test_all_servers_misconfigured_stops_with_clear_error() -> None:
    backend = ScriptedBackend(lambda s, p, b: MisconfiguredError("HTTP 401: bad key", status=401, server=s))
    sink = Sink()
    d = make(["http://a", "http://b"], backend, sink)
    with pytest.raises(ServerError, match="every server refuses"):
        await d.run(prompts(10))
    assert not sink.failed and not sink.done


async def test_stop_keeps_results_and_reports_unfinished() -> None:
    backend = ScriptedBackend(lambda s, p, b: None)
    backend.gate = asyncio.Event()
    sink = Sink()
    d = make(["http://a"], backend, sink, concurrency=3)
    task = asyncio.create_task(d.run(prompts(100)))
    while d.inflight < 3:
        await asyncio.sleep(0)
    d.request_stop()
    backend.gate.set()
    finished = await task
    assert finished is False
    assert len(sink.done) == 3  # the in-flight ones finished during the grace period; no new ones started


async def test_regenerate_all_answers_every_turn_in_order_on_one_server() -> None:
    sent: list[list[dict[str, Any]]] = []

    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        sent.append(list(p.messages or []))
        return None

    backend = ScriptedBackend(script)
    sink = Sink()
    d = make(["http://a", "http://b"], backend, sink)
    convo = Prompt(
        id="c1",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}],
        followups=[{"role": "user", "content": "q2"}, {"role": "user", "content": "q3"}],
    )

    async def one() -> AsyncIterator[Prompt]:
        yield convo

    assert await d.run(one())
    assert [m["content"] for m in sent[1]] == ["be brief", "q1", "answer c1", "q2"]
    assert [m["content"] for m in sent[2]] == ["be brief", "q1", "answer c1", "q2", "answer c1", "q3"]
    (rec,) = sink.done
    assert rec.turns is not None and len(rec.turns) == 3
    assert [m["content"] for m in rec.prompt] == ["be brief", "q1", "q2", "q3"]  # type: ignore[index]
    assert rec.completion_tokens == 15 and rec.prompt_tokens == 9
    assert len({t["server"] for t in rec.turns}) == 1, "later turns stay on the server holding the prefix"
    assert d.stats.completed == 1
    # quality signals per turn, and the record's: any turn's flag, the highest score
    assert all(t["quality"] == {"flags": [], "repetition_score": 0.0} for t in rec.turns)
    assert rec.quality == {**rec.turns[-1]["quality"], "repetition_score": 0.0}


async def test_regenerate_all_failure_in_a_later_turn_fails_the_conversation() -> None:
    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if len(p.messages or []) > 1:
            return PermanentError("HTTP 400: too long", status=400, server=server)
        return None

    backend = ScriptedBackend(script)
    sink = Sink()
    d = make(["http://a"], backend, sink)

    async def one() -> AsyncIterator[Prompt]:
        yield Prompt(
            id="c", messages=[{"role": "user", "content": "q1"}], followups=[{"role": "user", "content": "q2"}]
        )

    assert await d.run(one())
    assert not sink.done and [f.id for f in sink.failed] == ["c"]
