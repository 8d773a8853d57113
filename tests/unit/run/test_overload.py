"""Overload is not death: a read timeout on a server that holds a queue (or keeps answering others) backs the
server's in-flight cap off, neither sets it aside nor spends the prompt's attempts, and counts the abandoned
tokens; a timeout on a server that shows no work is still a failure of that server."""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp

from tests.helpers import factories
from tests.helpers.dispatch import ScriptedBackend, Sink, prompts, retry
from tests.helpers.doctor import observe, verdicts
from tokenmill.config import ControlSpec
from tokenmill.errors import RequestTimeout
from tokenmill.monitor.fleet import ServerView
from tokenmill.records import Prompt
from tokenmill.run.control import ConcurrencyController
from tokenmill.run.servers import ReadTimeouts, ServerPool

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


# ---- answers that outlive the read timeout while the server runs them (nothing queued) ----------------------


def test_a_timeout_while_running_grows_the_read_timeout_to_its_ceiling_then_cuts_the_running() -> None:
    pool = ServerPool([URL], 8, timeouts=ReadTimeouts(start_s=3.0, max_s=12.0), backoff=0.5)
    s = pool.servers[0]
    s.saw(queued=0.0, running=8.0, decode_tok_s=400.0)  # running what it was sent, nothing waits
    assert pool.overloaded(s, sent=0.0, now=3.0) == "work"
    assert s.read_timeout_s == 6.0 and s.limit == 8 and s.timeout_cap is None  # the timeout grows first
    assert pool.overloaded(s, sent=1.0, now=4.0) == "work" and s.read_timeout_s == 6.0  # sent before it grew
    assert pool.overloaded(s, sent=4.0, now=10.0) == "work" and s.read_timeout_s == 12.0  # the ceiling
    assert pool.overloaded(s, sent=11.0, now=23.0) == "work"
    assert s.read_timeout_s == 12.0 and s.limit == 4 and s.timeout_cap == 4 and s.work_cuts == 1  # fewer run
    assert s.limit_reason == "answers outlive the read timeout's ceiling: fewer running"
    assert (s.work_timeouts, s.timeouts, s.last_timeout) == (4, 4, "work")
    s.saw(queued=30.0, running=4.0, decode_tok_s=400.0)
    assert pool.overloaded(s, sent=30.0, now=42.0) == "queue" and s.last_timeout == "queue"


async def test_a_livelock_of_answers_longer_than_the_read_timeout_ends_with_every_prompt_answered() -> None:
    """8 running at the cap, answers that take 5 s against a 3 s read timeout: the same prompts used to time out
    and be sent again for ever. Now the read timeout grows past the work and every prompt is answered once."""
    clock = itertools.count(0.0, 0.5).__next__

    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        if (b.timeouts[-1] or 3.0) < 5.0:
            return RequestTimeout("no response within the read timeout", server=server)
        return None

    sink = Sink()
    backend = ScriptedBackend(script)
    d = factories.dispatcher(
        [URL], backend, sink, retry(max_attempts=2, read_timeout_s=3.0), 8, sampling={"max_tokens": 60},
        clock=clock,
    )  # fmt: skip
    server = d.servers[0]
    server.saw(queued=0.0, running=8.0, decode_tok_s=160.0)
    assert await d.run(prompts(40))
    assert not sink.failed and sorted(int(c.id) for c in sink.done) == list(range(40))
    assert server.read_timeout_s == 6.0 and server.work_timeouts == d.stats.outlived > 0
    assert server.usable and server.limit == 8  # no cut needed: the timeout grew past the work
    assert len(backend.calls) < 40 + 3 * 8  # each prompt at most a few times, not without end


async def test_an_answer_that_outlives_the_ceiling_is_failed_and_reported_never_retried_without_end(
    caplog: Any,
) -> None:
    def script(server: str, p: Prompt, b: ScriptedBackend) -> Any:
        return RequestTimeout("no response within the read timeout", server=server)

    sink = Sink()
    backend = ScriptedBackend(script)
    d = factories.dispatcher(
        [URL], backend, sink, retry(max_attempts=3, read_timeout_s=3.0, read_timeout_max_s=12.0), 4,
        sampling={"max_tokens": 60}, clock=itertools.count(0.0, 0.5).__next__,
    )  # fmt: skip
    d.servers[0].saw(queued=0.0, running=4.0, decode_tok_s=160.0)
    caplog.set_level("WARNING")
    assert await d.run(prompts(4))
    assert sorted(f.id for f in sink.failed) == ["0", "1", "2", "3"] and not sink.done
    failure = sink.failed[0]
    assert "read timeout's ceiling (12 s, retry.read_timeout_max_s)" in failure.error
    assert "raise retry.read_timeout_max_s or lower sampling.max_tokens" in failure.error
    assert len(backend.calls) <= 4 * (3 + 3)  # growth rounds plus max_attempts at the ceiling, each
    assert d.stats.repeatedly_abandoned == 4 and set(d.stats.repeated_ids) == {"0", "1", "2", "3"}
    assert "prompt 0 was abandoned on read timeouts 3 times" in caplog.text


def test_the_doctor_says_the_read_timeout_grew_when_answers_outlive_it_while_running() -> None:
    client = {"inflight": 8, "limit": 8, "timeouts": 12, "work_timeouts": 12, "last_timeout": "work",
              "timeout_age_s": 2.0, "read_timeout_s": 3.0, "read_timeout_now_s": 6.0,
              "read_timeout_max_s": 7200.0}  # fmt: skip
    found = verdicts(observe("compute_bound", client=client))
    assert "queue-timeout" not in found  # nothing was queued: not a queue wait
    v = found["work-timeout"]
    assert v.title == "answers outlive the read timeout"
    assert "tokenmill raised its read timeout from 3 s to 6 s (ceiling 7,200 s" in v.summary
    assert dict(v.evidence)["read timeout: job / now / ceiling"] == "3 s / 6 s / 7,200 s"
    assert "shorter than the work" in v.advice
    at_top = {**client, "read_timeout_now_s": 7200.0, "work_cuts": 2, "limit": 4}
    cut = verdicts(observe("compute_bound", client=at_top))["work-timeout"]
    assert (
        "at the ceiling (7,200 s, retry.read_timeout_max_s), so tokenmill cut the requests it runs to 4" in cut.summary
    )


def test_a_queue_cut_follows_what_the_server_runs_and_a_ceiling_cut_stays() -> None:
    pool = ServerPool([URL], 256, start=64)
    s = pool.servers[0]
    ctl = ConcurrencyController(pool.servers, ControlSpec(), ceiling=256)
    s.saw(queued=40.0, running=10.0, decode_tok_s=500.0)  # caught while its KV pool admitted only 10
    assert pool.overloaded(s, sent=0.0, now=5.0) == "queue" and s.limit == 10
    ctl.update([ServerView(URL, None, None, True, None, running=30.0, queued=0.0, max_running=72)])
    assert s.timeout_cap == 30 and s.limit == 30  # its pool freed up: it runs 30, and is sent 30
    s.timeout_cap, s.cap_from = 8, "work"  # cut because answers outlived the ceiling: fewer on purpose
    ctl.update([ServerView(URL, None, None, True, None, running=30.0, queued=0.0, max_running=72)])
    assert s.limit == 8


def test_a_fixed_concurrency_is_a_ceiling_of_what_the_server_holds() -> None:
    pool = ServerPool([URL, "http://b", "http://c"], 256, start=64)
    ctl = ConcurrencyController(pool.servers, ControlSpec(), ceiling=256)
    a, b, c = pool.servers
    assert a.limit == 64  # before its first scrape: min(256, control.initial)
    held = ServerView(URL, None, None, True, None, running=72.0, queued=150.0, max_running=72)
    big = ServerView("http://b", None, None, True, None, running=900.0, queued=0.0, max_running=1024)
    blind = ServerView("http://c", None, None, False, "GET /metrics answered HTTP 404", scrapes=1)
    ctl.update([held, big, blind])
    assert a.limit == 76 and a.limit_reason == "server cap 72, within concurrency 256"  # 72 + a queue of 4
    assert b.limit == 256 and b.limit_reason == "concurrency 256"  # it holds more than 256: 256
    assert c.limit == 256 and c.limit_reason == "concurrency 256 (no metrics)"


def test_a_timeout_beside_a_short_queue_is_the_work_outliving_it_not_a_queue_wait() -> None:
    """The queue the controller keeps (72 running, 4 queued, answers of ~120 s) waits ~7 s: a request that timed
    out after 1,800 s was running, however the queue gauge reads."""
    pool = ServerPool([URL], 76, timeouts=ReadTimeouts(start_s=1800.0, max_s=7200.0))
    s = pool.servers[0]
    s.completed, s.latency_s = 100, 12_000.0
    s.saw(queued=4.0, running=72.0, decode_tok_s=900.0)
    assert pool.overloaded(s, sent=0.0, now=1800.0) == "work" and s.read_timeout_s == 3600.0 and s.limit == 76
    s.saw(queued=240.0, running=72.0, decode_tok_s=900.0)  # a deep queue: ~400 s of wait, the tail waits longer
    assert pool.overloaded(s, sent=2000.0, now=2700.0) == "queue" and s.limit == 72
