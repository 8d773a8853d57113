"""Same configuration, same headline: the doctor run against the twins of the real servers in
tests/e2e/test_doctor_sglang.py (the same model config and flags, the same job) names the binding resource the
real server's doctor names there: the KV pool of a dense server with 2,048 KV tokens and 900-token answers, the
state pool of a hybrid capped at 4 by 12 slots, and a client that sends far fewer requests than the server runs."""

from __future__ import annotations

from pathlib import Path

from tests.engines.pool import SGLANG_DENSE, ServerPool, twin_of
from tests.helpers.engine_doctor import KV_SMALL, STATE_FLAGS, STATE_SMALL, job_for, named, run_until, verdicts
from tests.helpers.servers import live_server

KV_TWIN = twin_of(KV_SMALL)
STATE_TWIN = twin_of(STATE_SMALL)
DENSE_TWIN = twin_of(SGLANG_DENSE)


def test_the_twin_of_a_small_kv_pool_is_kv_bound(server_pool: ServerPool, tmp_path: Path) -> None:
    server = live_server(server_pool, KV_TWIN.name)
    job, out = job_for(tmp_path, server, n=40, max_tokens=900, concurrency=16)
    verdict = run_until(job, out, "a KV-bound verdict", lambda: named(out, "kv-bound"))
    assert dict(verdict["evidence"])["requests that fit at full length"].startswith("2 x ")
    assert not any(flag in change for change in verdict["changes"] for flag in STATE_FLAGS), verdict["changes"]
    rules = {v["rule"] for v in verdicts(out)}
    assert not rules & {"state-pool-bound", "scheduler-conservative"}, rules


def test_the_twin_of_a_hybrid_capped_by_its_state_pool_is_state_bound(server_pool: ServerPool, tmp_path: Path) -> None:
    server = live_server(server_pool, STATE_TWIN.name)
    job, out = job_for(tmp_path, server, n=60, max_tokens=300, concurrency=32)
    verdict = run_until(job, out, "a state-pool verdict", lambda: named(out, "state-pool-bound"))
    evidence = dict(verdict["evidence"])
    assert evidence["cap from the state pool"] == "12 slots // 3"
    assert evidence["running / max running"].split()[0].endswith("/4")  # the mean, then the peak when it differs
    assert "scheduler-conservative" not in {v["rule"] for v in verdicts(out)}


def test_the_twin_of_a_dense_server_tells_a_small_client_it_under_feeds(
    server_pool: ServerPool, tmp_path: Path
) -> None:
    server = live_server(server_pool, DENSE_TWIN.name)
    job, out = job_for(tmp_path, server, n=40, max_tokens=400, concurrency=2)
    verdict = run_until(job, out, "an under-feeding verdict", lambda: named(out, "client-underfeeding"))
    assert dict(verdict["evidence"])["client in flight / limit"].endswith("/2 (at its limit)")
