"""The batching state machine, driven with explicit times (no clock, no event loop)."""

from __future__ import annotations

import pytest

from tokenmill.config import SimSpec
from tokenmill.sim.scheduler import QueueFullError, Scheduler, SimRequest, State
from tokenmill.sim.timing import LinearStepModel

STEP = 0.010  # step_base_ms=10, step_per_req_ms=0
PREFILL_PER_TOKEN = 0.001  # prefill_ms_per_1k=1000


def make(*, max_running: int = 8, max_queued: int | None = None, interval: int = 40, scale: float = 1.0) -> Scheduler:
    cfg = SimSpec(
        max_running_requests=max_running,
        step_base_ms=10,
        step_per_req_ms=0,
        prefill_ms_per_1k=1000,
        max_total_tokens=10_000,
    )
    return Scheduler(LinearStepModel(cfg), time_scale=scale, max_queued=max_queued, log_interval=interval)


def req(prompt: int = 10, out: int = 5, at: float = 0.0) -> SimRequest:
    return SimRequest(prompt_tokens=prompt, output_tokens=out, arrived=at)


def run_until_idle(s: Scheduler, limit: int = 100_000) -> list[SimRequest]:
    """Jump from event to event, as the async driver does."""
    done: list[SimRequest] = []
    for _ in range(limit):
        at = s.next_event_at()
        if at is None:
            return done
        done += s.advance(at)
    raise AssertionError("scheduler never went idle")


def test_one_request_takes_prefill_plus_decode_steps() -> None:
    s = make()
    r = req(prompt=10, out=5)
    assert s.submit(r, 0.0) == []
    assert (s.running, s.waiting) == (1, 0)
    assert s.next_event_at() == pytest.approx(10 * PREFILL_PER_TOKEN)
    done = run_until_idle(s)
    assert done == [r]
    assert r.state is State.DONE
    assert r.first_token == pytest.approx(0.010)
    assert r.finished == pytest.approx(0.010 + 4 * STEP)  # the prefill made the first of 5 tokens
    assert (s.decode_tokens, s.prefill_tokens, s.ctx_tokens, s.running) == (4, 10, 0, 0)


def test_nothing_finishes_before_its_time() -> None:
    s = make()
    r = req(prompt=10, out=5)
    s.submit(r, 0.0)
    assert s.advance(0.049) == []  # due at 0.050
    assert s.advance(0.050 + 1e-12) == [r]


def test_batch_cap_queues_the_rest_fifo_and_admits_as_slots_free() -> None:
    s = make(max_running=2)
    reqs = [req(prompt=1, out=3 + i) for i in range(5)]
    for r in reqs:
        s.submit(r, 0.0)
    assert (s.running, s.waiting) == (2, 3)
    order: list[SimRequest] = []
    while (at := s.next_event_at()) is not None:
        order += s.advance(at)
        assert s.running <= 2
    assert order == reqs
    assert s.decode_tokens + len(reqs) == sum(r.output_tokens for r in reqs)  # tokens are conserved
    assert reqs[2].started == pytest.approx(reqs[0].finished)  # admitted when the first slot freed


def test_queue_limit_refuses_new_requests() -> None:
    s = make(max_running=1, max_queued=1)
    s.submit(req(), 0.0)  # runs
    s.submit(req(), 0.0)  # waits
    with pytest.raises(QueueFullError, match=r"The request queue is full\."):
        s.submit(req(), 0.0)
    assert (s.running, s.waiting) == (1, 1)


def test_token_pool_limits_admission() -> None:
    s = make(max_running=100)
    s.submit(req(prompt=6000), 0.0)
    s.submit(req(prompt=6000), 0.0)  # 12,001 tokens would not fit in 10,000
    assert (s.running, s.waiting) == (1, 1)
    assert s.snapshot().usage.full_token_usage == pytest.approx(6001 / 10_000)


def test_abort_frees_the_slot_and_its_tokens() -> None:
    s = make(max_running=1)
    a, b = req(prompt=10, out=100), req(prompt=10, out=2)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.advance(0.5)  # a is decoding
    assert s.ctx_tokens > 11
    s.abort(a, 0.5)
    assert a.state is State.ABORTED
    done = run_until_idle(s)
    assert done == [b]
    assert (s.running, s.waiting, s.ctx_tokens) == (0, 0, 0)


def test_abort_of_a_waiting_request_leaves_the_queue() -> None:
    s = make(max_running=1)
    a, b = req(out=3), req(out=3)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.abort(b, 0.0)
    assert s.waiting == 0
    assert run_until_idle(s) == [a]


def test_a_prefill_pauses_decoding_without_losing_the_started_step() -> None:
    s = make()
    a = req(prompt=10, out=11)  # 10 ms prefill, then 10 decode steps of 10 ms
    s.submit(a, 0.0)
    b = req(prompt=20, out=1, at=0.015)  # arrives mid-step: 5 ms into the first decode step
    s.submit(b, 0.015)  # its 20 ms prefill runs 15..35 ms, then a's step resumes where it stopped
    done = run_until_idle(s)
    assert done == [b, a]
    assert b.finished == pytest.approx(0.035)
    assert a.finished == pytest.approx(0.010 + 10 * STEP + 0.020)


def test_time_scale_zero_finishes_at_once() -> None:
    s = make(scale=0.0)
    reqs = [req(out=1000) for _ in range(3)]
    done: list[SimRequest] = []
    for r in reqs:
        done += s.submit(r, 1.0)
    assert sorted(done, key=id) == sorted(reqs, key=id)
    assert all(r.finished == 1.0 for r in reqs)
    assert s.next_event_at() is None


def test_time_scale_shrinks_a_thousand_steps() -> None:
    s = make(scale=0.001)
    r = req(prompt=1, out=1001)
    s.submit(r, 0.0)
    run_until_idle(s)
    assert r.finished == pytest.approx(0.001 * (0.001 + 1000 * 0.010))


def test_events_are_bounded_by_finishes_and_log_boundaries() -> None:
    s = make(interval=40)
    s.submit(req(prompt=1, out=1000), 0.0)
    wakeups = 0
    while s.next_event_at() is not None:
        s.advance(s.next_event_at() or 0.0)
        wakeups += 1
    assert wakeups <= 1000 // 40 + 3  # not one wake-up per step


def test_gen_throughput_is_measured_over_log_windows() -> None:
    s = make(interval=10)
    for _ in range(4):
        s.submit(req(prompt=1, out=500), 0.0)
    s.advance(0.001 + 0.5)
    assert s.snapshot().gen_throughput == pytest.approx(4 / STEP, rel=0.05)
    run_until_idle(s)
    assert s.snapshot().gen_throughput == 0.0  # idle


def test_pause_freezes_time_and_resume_continues() -> None:
    s = make()
    r = req(prompt=10, out=5)
    s.submit(r, 0.0)
    s.pause(0.02)
    assert s.next_event_at() is None
    assert s.advance(10.0) == []
    s.submit(req(), 10.0)
    assert s.waiting == 1  # queued, not admitted while paused
    s.resume(10.02)
    run_until_idle(s)
    assert r.finished == pytest.approx(10.0 + 0.010 + 4 * STEP + 0.010)  # + the second prefill


def test_drain_hands_back_every_unfinished_request() -> None:
    s = make(max_running=1)
    a, b = req(out=50), req(out=50)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    assert set(map(id, s.drain())) == {id(a), id(b)}
    assert (s.running, s.waiting) == (0, 0)


def test_a_refused_request_changes_nothing() -> None:
    s = make(max_running=1, max_queued=1)
    a, b = req(prompt=10, out=2), req(prompt=10, out=2)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    done = s.advance(0.025)  # a finished (10 ms prefill + 1 step), b was admitted
    assert done == [a]
    s.submit(req(), 0.025)  # waits
    with pytest.raises(QueueFullError):
        s.submit(req(), 0.025)
    assert (s.running, s.waiting) == (1, 1)
