"""Overload is not death: a read timeout on a server that holds a queue (or keeps answering others) backs the
server's in-flight cap off, neither sets it aside nor spends the prompt's attempts, and counts the abandoned
tokens; a timeout on a server that shows no work is still a failure of that server."""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp

from tests import factories
from tests.unit.doctor.test_doctor_rules import observe, verdicts
from tests.unit.run.test_dispatch import ScriptedBackend, Sink, prompts, retry
from tokenmill.config import ControlSpec
from tokenmill.errors import RequestTimeout
from tokenmill.monitor.fleet import ServerView
from tokenmill.records import Prompt
from tokenmill.run.control import ConcurrencyController
from tokenmill.run.servers import ServerPool

URL = "http://a"


async def test_timeouts_on_a_server_with_a_queue_back_off_and_never_set_it_aside() -> None:
    timeouts = {"left": 30}

    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if int(p.id) >= 10 and timeouts["left"] > 0:  # ten answers, then a queue outgrows the read timeout
            timeouts["left"] -= 1
            return RequestTimeout("no response within the read timeout", server=server)
        return None

    probes: list[str] = []

    async def probe(session: aiohttp.ClientSession, url: str) -> bool:
        probes.append(url)
        return True

    sink = Sink()
    clock = itertools.count(0.0, 0.25).__next__  # every look at the clock a quarter second later
    d = factories.dispatcher(
        [URL], ScriptedBackend(script), sink, retry(max_attempts=2, quarantine_after=3), 16,
        sampling={"max_tokens": 8}, clock=clock, probe=probe,
    )  # fmt: skip
    server = d.servers[0]
    server.queued, server.running = 40.0, 4.0  # what the monitor's last scrape said
    assert await d.run(prompts(60))
    assert not sink.failed  # 30 timeouts against max_attempts 2: none spent an attempt
    assert sorted(int(c.id) for c in sink.done) == list(range(60))
    assert server.usable and server.problem is None and server.set_aside_at is None and not probes
    assert server.timeouts == 30 and d.stats.abandoned == 30
    assert server.limit == 4 and server.timeout_cap == 4  # cut at once to what it runs: no queue left to wait in
    assert server.limit_reason == "queue wait > read timeout: cut to what it runs"
    # every abandoned request counted at most max_tokens (8), and some were counted
    assert 0 < d.stats.abandoned_tokens <= 8 * 30
    assert server.abandoned_tokens == d.stats.abandoned_tokens


async def test_a_timeout_on_a_server_that_shows_no_work_still_sets_it_aside() -> None:
    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        return RequestTimeout("no response within the read timeout", server=server)

    async def probe(session: aiohttp.ClientSession, url: str) -> bool:
        return True

    sink = Sink()
    d = factories.dispatcher(
        [URL], ScriptedBackend(script), sink, retry(max_attempts=2, quarantine_after=2), 2,
        sampling={"max_tokens": 8}, probe=probe,
    )  # fmt: skip
    assert await d.run(prompts(3))
    assert sorted(f.id for f in sink.failed) == ["0", "1", "2"]  # attempts spent: a dead server's timeouts
    assert all(f.attempts == 2 for f in sink.failed)
    assert d.servers[0].set_aside_at is not None and d.servers[0].timeouts == 0 and d.stats.abandoned == 0


def test_one_cut_per_round_trip_and_a_completion_since_sending_proves_the_server_busy() -> None:
    pool = ServerPool([URL], 100, backoff=0.5)
    s = pool.servers[0]
    assert not pool.overloaded(s, sent=10.0, now=20.0)  # no scrape, no completion: it looks dead
    s.last_completed_at = 12.0  # it answered another request after this one was sent
    assert pool.overloaded(s, sent=10.0, now=20.0) and s.limit == 50
    assert pool.overloaded(s, sent=11.0, now=21.0) and s.limit == 50  # sent before the cut: no second cut
    assert not pool.overloaded(s, sent=13.0, now=30.0)  # nothing completed after it was sent
    s.running = 30.0
    assert pool.overloaded(s, sent=25.0, now=31.0) and s.limit == 30  # never below what it was seen running
    pool.set_draining(URL, True)
    pool.set_draining(URL, False)  # another process: its cap is learned again
    assert s.timeout_cap is None


def test_a_server_whose_decode_counter_stands_still_is_stuck_not_busy() -> None:
    pool = ServerPool([URL], 100)
    s = pool.servers[0]
    s.saw(queued=40.0, running=8.0, decode_tok_s=0.0)  # holds requests, decodes nothing: hung
    assert not pool.overloaded(s, sent=10.0, now=20.0)
    s.saw(queued=40.0, running=8.0, decode_tok_s=900.0)  # decoding: busy
    assert pool.overloaded(s, sent=10.0, now=20.0)
    s.saw(None, None, None)  # its scrape failed
    assert not s.busy_since(30.0)


def test_the_adaptive_controller_keeps_under_the_cap_timeouts_set() -> None:
    pool = ServerPool([URL], 64, adaptive=True)
    s = pool.servers[0]
    ctl = ConcurrencyController(pool.servers, ControlSpec())
    view = ServerView(URL, None, None, True, None, running=200.0, queued=0.0, max_running=256)
    ctl.update([view])
    assert s.limit > 200  # the cap plus a queue
    s.timeout_cap = 120
    ctl.update([view])
    assert s.limit == 120 and s.limit_reason == "queue wait > read timeout: capped at 120"


def test_the_doctor_names_queue_wait_beyond_the_read_timeout_with_the_fix() -> None:
    client = {"inflight": 250, "limit": 256, "timeouts": 37, "timeout_age_s": 4.0, "read_timeout_s": 30.0}
    found = verdicts(observe("kv_bound", client=client))
    v = found["queue-timeout"]
    assert v.title == "queue wait exceeds the read timeout"
    assert "server-down" not in found
    assert dict(v.evidence)["read timeout (retry.read_timeout_s)"] == "30 s"
    assert "lower `concurrency`" in v.advice and "retry.read_timeout_s" in v.advice
    stale = {**client, "timeout_age_s": 3600.0}
    assert "queue-timeout" not in verdicts(observe("kv_bound", client=stale))
    assert "queue-timeout" not in verdicts(observe("kv_bound", client={"inflight": 250, "limit": 256}))
