"""The scheduler's finite-KV mode (what the twin uses): SGLang's admission reserve, new-token ratio,
retraction and log lines, driven with explicit times and a small hand-checkable pool model."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import pytest

from tokenmill.config import SimSpec
from tokenmill.sim.scheduler import KvPolicy, PoolModel, Scheduler, SimRequest, State
from tokenmill.sim.timing import LinearStepModel, PoolUsage

STEP = 0.010
PREFILL_PER_TOKEN = 0.001
FIXED_RATIO = KvPolicy(
    init_ratio=0.5, min_ratio=0.5, decay_steps=600, clip_max_new_tokens=4096, retract_decode_steps=20
)
NO_RESERVE = KvPolicy(init_ratio=0.0, min_ratio=0.0, decay_steps=600, clip_max_new_tokens=4096, retract_decode_steps=20)


class Pool:
    """A finite KV pool of ``kv`` tokens, 10 ms decode steps, 1 ms of prefill per token, one state slot each."""

    def __init__(
        self,
        kv: int,
        policy: KvPolicy,
        *,
        max_running: int = 100,
        hybrid: bool = True,
        graph_bs: int = 8,
        chunk: int | None = None,
        mixed: bool = False,
    ) -> None:
        self.kv = kv
        self.mixed = mixed
        self.reads: list[int] = []  # the KV tokens each prefill batch reads for its decode rows
        self.policy = policy
        self.max_running = max_running
        self.hybrid = hybrid
        self.graph_bs = graph_bs
        self.prefill_batches: list[list[int]] = []
        self.chunk = chunk

    @property
    def chunked_prefill_size(self) -> int | None:
        return self.chunk

    @property
    def mixed_chunk(self) -> bool:
        return self.mixed

    @property
    def max_running_requests(self) -> int:
        return self.max_running

    @property
    def max_total_tokens(self) -> int:
        return self.kv

    @property
    def mamba_slots(self) -> int:
        return self.max_running if self.hybrid else 0

    @property
    def kv_policy(self) -> KvPolicy:
        return self.policy

    @property
    def is_hybrid(self) -> bool:
        return self.hybrid

    @property
    def cuda_graph_max_bs(self) -> int:
        return self.graph_bs

    def step_time_s(self, running: int, ctx_tokens: int) -> float:
        return STEP

    def prefill_time_s(self, new_tokens: int) -> float:
        return PREFILL_PER_TOKEN * new_tokens

    def prefill_batch_time_s(self, fill_tokens: Sequence[int], read_tokens: int = 0) -> float:
        self.prefill_batches.append(list(fill_tokens))
        self.reads.append(read_tokens)
        return PREFILL_PER_TOKEN * sum(fill_tokens)

    def admit(self, running: int, ctx_tokens: int, new_tokens: int) -> bool:
        return running < self.max_running and ctx_tokens + new_tokens <= self.kv

    def usage(self, running: int, ctx_tokens: int) -> PoolUsage:
        full = ctx_tokens / self.kv
        mamba = running / self.max_running if self.hybrid else 0.0
        return PoolUsage(max(full, mamba), full, mamba, ctx_tokens, running if self.hybrid else 0)


def make(pool: Pool, interval: int = 1000) -> Scheduler:
    return Scheduler(pool, time_scale=1.0, max_queued=None, log_interval=interval)


def req(prompt: int, out: int, max_new: int = 0) -> SimRequest:
    return SimRequest(prompt_tokens=prompt, output_tokens=out, arrived=0.0, max_new_tokens=max_new)


def run_until_idle(s: Scheduler, limit: int = 100_000) -> list[SimRequest]:
    done: list[SimRequest] = []
    for _ in range(limit):
        at = s.next_event_at()
        if at is None:
            return done
        done += s.advance(at)
    raise AssertionError("scheduler never went idle")


def test_the_pool_is_recognised_and_the_plain_model_is_not() -> None:
    assert isinstance(Pool(100, FIXED_RATIO), PoolModel)
    assert not isinstance(LinearStepModel(SimSpec()), PoolModel)


def test_admission_keeps_room_for_the_running_requests_future_tokens() -> None:
    s = make(Pool(1000, FIXED_RATIO))
    a, b, c = req(100, 50, 400), req(100, 50, 400), req(100, 50, 400)
    s.submit(a, 0.0)  # an idle engine takes its first request; its prefill ends at 0.1
    s.submit(b, 0.1)  # free 899 - 0.5 * 399 reserved = 699.5 > 100 + 400 + 1 page
    s.submit(c, 0.1)  # b, admitted in this batch, is charged in full: 699.5 - 501 = 198.5 <= 501: c waits
    assert (s.running, s.waiting) == (2, 1)
    done = run_until_idle(s)
    assert set(map(id, done)) == {id(a), id(b), id(c)}
    assert c.started == pytest.approx(a.finished)  # the reserve shrinks as fast as the pool fills: no earlier


def test_requests_of_one_batch_are_each_charged_their_whole_limit() -> None:
    """SGLang charges every request it admits into a prefill batch its prompt, clipped limit and a page; the
    decaying ratio applies only to requests already running: of three arriving together two fit, not three."""
    s = make(Pool(1000, FIXED_RATIO))
    reqs = [req(100, 50, 300) for _ in range(3)]
    for r in reqs:
        s.submit(r, 0.0)  # a is free (idle engine), b: 401 < 1000 - 401, c: 401 >= 198
    assert (s.running, s.waiting) == (2, 1)


def test_an_ignore_eos_request_reserves_its_whole_remaining_output() -> None:
    """Running ordinary requests reserve ratio x what they may still write; ignore_eos ones all of it (SGLang's
    ratio 1 for a request that cannot stop early), so fewer ignore_eos requests are let in."""
    seen = []
    for ignore in (False, True):
        s = make(Pool(1000, FIXED_RATIO))
        a = req(100, 50, 400)
        a.ignore_eos = ignore
        s.submit(a, 0.0)
        s.submit(b := req(100, 50, 400), 0.1)  # free 899 minus a's reserve: 0.5 x 399 or the whole 399
        seen.append((s.running, b.state))
    assert seen == [(2, State.RUNNING), (1, State.WAITING)]


def test_after_a_request_did_not_fit_none_is_tried_until_one_leaves() -> None:
    """SGLang's batch_is_full: the ratio falls while the queue waits, but no admission is tried until a running
    request finishes, so the third request starts when the first one ends although room opened earlier."""
    policy = KvPolicy(init_ratio=0.7, min_ratio=0.1, decay_steps=100, clip_max_new_tokens=4096, retract_decode_steps=20)
    s = make(Pool(1300, policy))
    a, b, c = req(100, 400, 400), req(100, 400, 400), req(100, 200, 400)
    s.submit(a, 0.0)
    s.submit(b, 0.1)  # 1199 - 0.7 x 399 = 919.7 > 501
    s.submit(c, 0.1)  # 919.7 - 501 (b, in the same batch) = 418.7 <= 501: does not fit
    assert c.state is State.WAITING
    # 150 steps on the ratio is 0.1: 1300 - 2 x ~250 - 0.1 x 2 x ~250 = ~750 > 501, yet c waits
    s.advance(0.2 + 150 * STEP)
    assert c.state is State.WAITING
    run_until_idle(s)
    assert c.started == pytest.approx(a.finished)


def test_the_ratio_is_not_reset_while_requests_wait_for_the_next_batch() -> None:
    """SGLang re-inits the new-token ratio when its scheduler idles; requests finishing with a queue behind them
    are followed by the next batch at once, under the decayed ratio."""
    policy = KvPolicy(init_ratio=0.7, min_ratio=0.1, decay_steps=100, clip_max_new_tokens=4096, retract_decode_steps=20)
    s = make(Pool(5000, policy, max_running=1))
    a, b = req(10, 300, 300), req(10, 300, 300)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.advance(a.arrived + 0.01 + 300 * STEP + 0.001)
    assert b.state is State.RUNNING
    assert s.snapshot().new_token_ratio == pytest.approx(0.1)


def test_without_a_finite_pool_the_same_requests_all_run() -> None:
    cfg = SimSpec(max_running_requests=100, max_total_tokens=1000, step_base_ms=10, step_per_req_ms=0)
    s = Scheduler(LinearStepModel(cfg), time_scale=1.0, max_queued=None, log_interval=1000)
    for _ in range(3):
        s.submit(req(100, 50, 400), 0.0)
    assert (s.running, s.waiting) == (3, 0)


def test_retraction_requeues_the_least_advanced_request_which_resumes_after_a_new_prefill() -> None:
    pool = Pool(1000, NO_RESERVE)
    s = make(pool)
    a, b = req(100, 600), req(200, 600)
    s.submit(a, 0.0)
    s.submit(b, 0.1)  # after a's prefill: 801 tokens asked, 899 free: admitted; together they outgrow the pool
    assert s.running == 2
    done = run_until_idle(s)
    assert done == [a, b]
    # 698 tokens free after both prefills, 2 a step: at step 349 the next step does not fit. Both generated
    # 350 tokens; SGLang retracts the fewest generated, then the longest prompt: b.
    assert (a.retractions, b.retractions) == (0, 1)
    assert (s.retracted_requests, s.retracted_input_tokens, s.retracted_output_tokens) == (1, 200, 350)
    assert pool.prefill_batches == [[100], [200], [550]]  # b prefills its prompt and its 350 tokens again
    assert a.finished == pytest.approx(0.300 + 599 * STEP)
    assert b.first_token == pytest.approx(0.300)  # the first prefill's token reached the client already
    assert b.finished == pytest.approx(a.finished + 0.550 + 249 * STEP)  # re-admitted when a left
    assert s.decode_tokens + 3 == a.output_tokens + b.output_tokens  # three prefills made one token each
    assert (s.running, s.waiting, s.ctx_tokens) == (0, 0, 0)


def test_after_a_retraction_the_ratio_estimates_the_remaining_requests_needs() -> None:
    s = make(Pool(1000, NO_RESERVE))
    a, b = req(100, 600), req(200, 600)
    s.submit(a, 0.0)
    s.submit(b, 0.1)
    s.advance(0.300 + 349 * STEP + 1e-9)  # the step the pool runs out
    assert b.state is State.WAITING
    snap = s.snapshot()
    assert snap.new_token_ratio == pytest.approx((350 + 20) / (600 + 1))  # (generated + 20 per req) / max_new
    assert (snap.retracted_requests, snap.last_retracted, snap.running, snap.waiting) == (1, 1, 1, 1)


def test_the_ratio_decays_per_decode_step_and_resets_when_idle() -> None:
    policy = KvPolicy(init_ratio=0.7, min_ratio=0.1, decay_steps=600, clip_max_new_tokens=4096, retract_decode_steps=20)
    s = make(Pool(100_000, policy))
    s.submit(req(10, 1000), 0.0)
    s.advance(0.010 + 300 * STEP + 1e-9)
    assert s.snapshot().new_token_ratio == pytest.approx(0.7 - 0.6 * 300 / 600)
    s.advance(0.010 + 900 * STEP + 1e-9)
    assert s.snapshot().new_token_ratio == pytest.approx(0.1)  # floored
    run_until_idle(s)
    s.submit(req(10, 5), 100.0)
    assert s.snapshot().new_token_ratio == pytest.approx(0.7)


def test_clipped_estimate_for_huge_limits() -> None:
    clip = KvPolicy(init_ratio=1.0, min_ratio=1.0, decay_steps=600, clip_max_new_tokens=100, retract_decode_steps=20)
    s = make(Pool(1000, clip))
    s.submit(req(10, 5, 1_000_000), 0.0)
    s.submit(req(10, 5, 1_000_000), 0.0)  # charged 10 + 100 (clipped), not a million
    assert s.running == 2


def test_a_waiting_request_starts_when_the_slot_freed_however_late_the_driver_wakes() -> None:
    cfg = SimSpec(max_running_requests=1, step_base_ms=10, step_per_req_ms=0, prefill_ms_per_1k=1000)
    s = Scheduler(LinearStepModel(cfg), time_scale=1.0, max_queued=None, log_interval=1000)
    a, b = req(10, 5), req(10, 5)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    done = s.advance(1.0)  # the driver overslept by most of a second
    assert done == [a, b]
    assert b.started == pytest.approx(a.finished) == pytest.approx(0.050)
    assert b.finished == pytest.approx(0.100)


def test_a_request_arriving_late_is_not_admitted_before_it_arrived() -> None:
    cfg = SimSpec(max_running_requests=1, step_base_ms=10, step_per_req_ms=0, prefill_ms_per_1k=1000)
    s = Scheduler(LinearStepModel(cfg), time_scale=1.0, max_queued=None, log_interval=1000)
    a = req(10, 5)
    s.submit(a, 0.0)
    b = SimRequest(prompt_tokens=10, output_tokens=5, arrived=0.5)
    s.submit(b, 0.5)  # a finished at 0.05 while nobody was looking
    assert b.started == pytest.approx(0.5)


def _decode_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Decode batch")]


def test_hybrid_decode_log_line_has_sglang_hybrid_fields(caplog: pytest.LogCaptureFixture) -> None:
    s = make(Pool(100_000, FIXED_RATIO, graph_bs=2), interval=10)
    for _ in range(3):
        s.submit(req(10, 25), 0.0)
    with caplog.at_level(logging.INFO, logger="tokenmill.sim"):
        run_until_idle(s)
    lines = _decode_lines(caplog)
    assert lines
    pattern = (
        r"Decode batch, #running-req: (\d+), #full token: (\d+), full token usage: \d\.\d\d, mamba num: (\d+), "
        r"mamba usage: \d\.\d\d, cuda graph: (True|False), gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+"
    )
    first = re.fullmatch(pattern, lines[0])
    assert first is not None, lines[0]
    assert first.group(1) == "3" and first.group(3) == "3"
    assert first.group(2) == str(3 * (10 + 1 + 10))  # prompt, the prefill's token, 10 decode steps
    assert first.group(4) == "False"  # 3 running > --cuda-graph-max-bs 2


def test_plain_model_decode_log_line(caplog: pytest.LogCaptureFixture) -> None:
    s = make(Pool(100_000, FIXED_RATIO, hybrid=False), interval=10)
    with caplog.at_level(logging.INFO, logger="tokenmill.sim"):
        s.submit(req(10, 25), 0.0)
        run_until_idle(s)
    pattern = (
        r"Decode batch, #running-req: 1, #token: \d+, token usage: \d\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0"
    )
    assert all(re.fullmatch(pattern, line) for line in _decode_lines(caplog))
    prefill = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Prefill batch")]
    assert "token usage: " in prefill[0] and "mamba" not in prefill[0]


def test_retraction_log_line(caplog: pytest.LogCaptureFixture) -> None:
    s = make(Pool(1000, NO_RESERVE))
    s.submit(req(100, 600), 0.0)
    s.submit(req(200, 600), 0.1)  # after the first one's prefill (arriving together, one would wait)
    with caplog.at_level(logging.WARNING, logger="tokenmill.sim"):
        run_until_idle(s)
    [line] = [r.getMessage() for r in caplog.records if "Retract" in r.getMessage()]
    assert line == (
        "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 550, "
        "#mamba_num_gained: 1, #new_token_ratio: 0.0000 -> 0.6156"
    )


def test_a_long_prompt_is_prefilled_in_chunks_of_the_chunk_size_as_sglang_writes_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """--chunked-prefill-size 256: a 1,000-token prompt is four prefill batches, 256 + 256 + 256 + 232 tokens, each
    priced on its own and logged; its first token comes after the last; decode waits for all of them."""
    pool = Pool(8000, NO_RESERVE, chunk=256)
    s = make(pool)
    r = req(1000, 3)
    with caplog.at_level(logging.INFO, logger="tokenmill.sim"):
        s.submit(r, 0.0)
        s.advance(10.0)
    assert pool.prefill_batches == [[256], [256], [256], [232]]
    lines = [m for m in caplog.messages if m.startswith("Prefill batch")]
    assert [int(re.search(r"#new-token: (\d+)", m)[1]) for m in lines] == [256, 256, 256, 232]  # type: ignore[index]
    assert r.first_token == pytest.approx(1000 * PREFILL_PER_TOKEN)
    assert r.finished == pytest.approx(1000 * PREFILL_PER_TOKEN + 2 * STEP)


def test_chunks_cut_across_requests_and_each_first_token_comes_with_its_last_chunk() -> None:
    """Two 300-token prompts with 256-token chunks: 256, then the rest of the first and the start of the second
    (44 + 212), then 88; the first request's prompt is done after the second batch, the other's after the third."""
    pool = Pool(8000, NO_RESERVE, chunk=256)
    s = make(pool)
    a, b = req(300, 2), req(300, 2)
    s.submit_many([a, b], 0.0)
    s.advance(10.0)
    assert pool.prefill_batches == [[256], [44, 212], [88]]
    assert a.first_token == pytest.approx(512 * PREFILL_PER_TOKEN)
    assert b.first_token == pytest.approx(600 * PREFILL_PER_TOKEN)


def mixed_case(mixed: bool) -> tuple[Pool, Scheduler, SimRequest, SimRequest]:
    """One request decoding (a 50-token prompt, 20 tokens to make) when a 1,000-token prompt arrives at 0.1 s,
    with 256-token chunks: four prefill batches."""
    pool = Pool(8000, NO_RESERVE, chunk=256, mixed=mixed)
    s = make(pool)
    a, b = req(50, 20), req(1000, 3)
    s.submit(a, 0.0)
    s.submit(b, 0.1)
    return pool, s, a, b


def test_without_mixed_chunk_a_prefill_batch_runs_alone_and_decode_waits() -> None:
    """SGLang's default: the prefill batches run alone; the decoding request, 6 tokens made when the long prompt
    arrived (its prefill's and 5 decode steps'), makes its other 14 after them."""
    pool, s, a, b = mixed_case(mixed=False)
    run_until_idle(s)
    assert pool.prefill_batches[1:] == [[256], [256], [256], [232]] and pool.reads[1:] == [0, 0, 0, 0]
    assert b.first_token == pytest.approx(0.1 + 1000 * PREFILL_PER_TOKEN)
    assert a.finished == pytest.approx(0.1 + 1000 * PREFILL_PER_TOKEN + 14 * STEP)


def test_with_mixed_chunk_the_running_request_decodes_in_each_prefill_batch() -> None:
    """--enable-mixed-chunk: the decoding request is a row of each of the four prefill batches, one token each
    (taken from the chunk budget: 255 prompt tokens a batch), and each batch reads its KV (prompt and tokens made
    so far); after them it has 4 tokens fewer to make, so it finishes 4 decode steps sooner (less the 4 rows'
    prefill price). The same tokens are made in all."""
    pool, s, a, b = mixed_case(mixed=True)
    run_until_idle(s)
    assert pool.prefill_batches[1:] == [[255, 1], [255, 1], [255, 1], [235, 1]]
    made = 50 + 6  # the decoding row's KV at the first mixed batch
    assert pool.reads[1:] == [made, made + 1, made + 2, made + 3]
    prefill = (1000 + 4) * PREFILL_PER_TOKEN
    assert b.first_token == pytest.approx(0.1 + prefill)
    assert a.finished == pytest.approx(0.1 + prefill + 10 * STEP)
    _, alone, _, _ = mixed_case(mixed=False)
    run_until_idle(alone)
    assert s.decode_tokens == alone.decode_tokens == 19 + 2 and s.ctx_tokens == alone.ctx_tokens == 0


def test_requests_arriving_together_are_one_prefill_batch() -> None:
    """What one iteration of SGLang's loop receives is admitted as one batch (one prefill, priced once)."""
    pool = Pool(8000, NO_RESERVE)
    s = make(pool)
    reqs = [req(50, 2) for _ in range(3)]
    done, refused = s.submit_many(reqs, 0.0)
    assert not done and not refused
    assert pool.prefill_batches == [[50, 50, 50]]


def test_the_next_iteration_boundary_is_the_end_of_the_step_under_way() -> None:
    """Arrivals wait for the end of the prefill or decode step under way (where SGLang's loop next receives)."""
    pool = Pool(8000, NO_RESERVE)
    s = make(pool)
    s.submit(req(100, 50), 0.0)
    assert s.boundary_at_or_after(0.05) == pytest.approx(0.1)  # the prefill ends at 0.1
    s.advance(0.1)
    assert s.boundary_at_or_after(0.1 + 0.25 * STEP) == pytest.approx(0.1 + STEP)
    assert s.boundary_at_or_after(0.1 + 3 * STEP) == pytest.approx(0.1 + 3 * STEP)
