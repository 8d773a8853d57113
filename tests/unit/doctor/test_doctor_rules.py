"""Every doctor rule against /metrics snapshots (tests/fixtures/metrics/doctor/*.yaml), each fixture's ``about``
saying where it came from: recorded from a real server (vLLM; SGLang by scripts/record_doctor_fixtures.py), or
written from SGLang's metric definitions where no small real server can produce the situation (a GPU-sized
model's pools).

A fixture holds a server's /server_info (or none), a few /metrics bodies taken ``interval_s`` apart (a
null body is a scrape that failed), the client's side of the server and, optionally, the client process.
"""

from __future__ import annotations

import pytest

from tests.helpers.doctor import FIXTURES, evidence, fixture, observe, verdicts
from tokenmill.config import DoctorSpec
from tokenmill.doctor import diagnose
from tokenmill.doctor.rules import RULE_IDS


def test_state_pool_bound_no_buffer_names_the_state_pool_and_recommends_radix_off_and_bf16() -> None:
    found = diagnose(observe("state_bound_no_buffer"), DoctorSpec())
    assert found[0].rule == "state-pool-bound" and found[0].binds == "state pool"
    v = found[0]
    ev = evidence(v)
    assert ev["running / max running"] == "131/131"
    assert ev["cap from the state pool"] == "394 slots // 3"
    assert ev["KV pool usage"] == "31%"
    assert ev["state mode"] == "no_buffer + radix cache"
    # N keeps the state memory (<= 394 slots) and fits N requests of the measured context in 90% of KV
    assert v.changes[0] == "--disable-radix-cache --max-running-requests 380"
    assert "--mamba-ssm-dtype bfloat16" in v.changes
    radix_off = v.predictions[0]
    assert (radix_off.source, radix_off.before.max_running, radix_off.after.max_running) == ("observed", 131, 380)
    assert "kv-bound" not in {x.rule for x in found}


def test_state_pool_bound_with_the_planner_predicts_throughput_before_and_after() -> None:
    v = verdicts(observe("state_bound_no_buffer"), model="qwen3.6-35b-a3b", gpu="h200")["state-pool-bound"]
    planned = [p for p in v.predictions if p.source == "planner"]
    assert {p.change.split()[0] for p in planned} == {
        "--disable-radix-cache",
        "--mamba-ssm-dtype",
        "--mem-fraction-static",  # a ratio-sized state pool grows with the static share
    }
    for p in planned:
        assert p.after.max_running > p.before.max_running
        assert p.before.tok_s_per_gpu and p.after.tok_s_per_gpu and p.after.tok_s_per_gpu > p.before.tok_s_per_gpu
        assert p.note is None  # the planner's picture of today's server matches the observed cap
    assert v.changes[0] == planned[0].change  # best predicted gain first
    assert "tok/s per GPU" in v.line()


def test_planner_on_the_wrong_gpu_says_its_base_does_not_match() -> None:
    v = verdicts(observe("state_bound_no_buffer"), model="qwen3.6-35b-a3b", gpu="h100")["state-pool-bound"]
    assert any(p.note and "check --gpu" in p.note for p in v.predictions)


def test_state_pool_bound_extra_buffer_keeps_the_radix_cache_when_prefixes_hit() -> None:
    v = verdicts(observe("state_bound_extra_buffer"))["state-pool-bound"]
    assert evidence(v)["cap from the state pool"] == "394 slots // 5"
    assert evidence(v)["state slots held per request"] == "3"
    assert "--mamba-radix-cache-strategy extra_buffer_lazy" in v.changes
    assert "--mamba-ssm-dtype bfloat16" in v.changes
    assert not any("--disable-radix-cache" in c for c in v.changes)  # 35% cache hits: the cache earns its slots


def test_state_pool_full_without_server_info() -> None:
    found = verdicts(observe("state_pool_full"))
    v = found["state-pool-bound"]
    assert evidence(v)["state pool usage"] == "97%"
    assert v.changes == ("--mamba-ssm-dtype bfloat16",)


def test_kv_bound() -> None:
    """The recorded server: 4 of 64 run, 8 wait, because each reserves its prompt and whole output (ignore_eos) in
    8,192 tokens. Its pool is sized by --max-total-tokens, so a larger static share would not grow it; the change
    that keeps the model's outputs comes first, the fp8 KV cache (it changes them) after it."""
    found = verdicts(observe("kv_bound"))
    assert "state-pool-bound" not in found and "running-cap" not in found
    v = found["kv-bound"]
    assert evidence(v)["running / max running"] == "4/64"
    assert evidence(v)["requests that fit at full length"] == "4 x 2,044 tokens in 8,192"
    assert v.changes == ("--max-total-tokens 16384", "--kv-cache-dtype fp8_e4m3")


def test_retractions_sglang() -> None:
    """The recorded server: the retraction counter at 1, 3, 3, 3, 4 over 24 s."""
    v = verdicts(observe("retractions"))["retractions"]
    rate = float(evidence(v)["retractions per minute"])
    assert rate == pytest.approx(7.5)  # 3 in 24 s
    assert v.changes == ("--schedule-conservativeness 1.3",)


def test_preemptions_vllm() -> None:
    v = verdicts(observe("vllm_preemptions"))["retractions"]
    assert "preemptions per minute" in evidence(v)
    assert "--max-num-seqs" in v.advice
    assert v.changes == ()


def test_conservative_admission() -> None:
    v = verdicts(observe("scheduler_conservative"))["scheduler-conservative"]
    assert evidence(v)["running / max running"] == "40/256"
    assert v.changes == ("--schedule-conservativeness 0.3",)


def test_a_server_at_its_running_cap_is_named_so_not_compute_bound() -> None:
    found = verdicts(observe("compute_bound"))
    # a dense server, KV at 1%: neither pool binds, the cap does
    assert "state-pool-bound" not in found and "kv-bound" not in found
    assert "compute-bound" not in found  # no roofline says compute here
    v = found["running-cap"]
    assert (v.title, v.binds) == ("at its running cap", "running cap")
    assert evidence(v)["running / max running"] == "32/32"
    assert v.changes[0] == "--max-running-requests 64"
    assert "--quantization fp8" in v.changes
    assert not any("mamba" in c for c in v.changes)  # a dense server gets no state-pool advice
    assert not any("state pool" in c for c in v.caveats)  # nor a caveat about a state pool it does not have


def test_prefill_heavy() -> None:
    v = verdicts(observe("prefill_heavy"))["prefill-heavy"]
    assert evidence(v)["prompt / output"] == "13.3x"
    assert "--enable-mixed-chunk" in v.changes


def test_client_underfeeding() -> None:
    found = diagnose(observe("underfeeding"), DoctorSpec())
    assert found[0].rule == "client-underfeeding" and found[0].binds == "client concurrency"
    v = found[0]
    assert evidence(v)["client in flight / limit"] == "8/8 (at its limit)"
    assert v.changes == ("--concurrency 80",)  # 1.25 x the server's cap of 64
    assert v.severity == "warning"
    p = v.predictions[0]
    assert (p.what, p.before.max_running, p.after.max_running) == ("running", 8, 64)


def test_client_underfeeding_is_a_hint_when_the_client_is_unknown() -> None:
    v = verdicts(observe("underfeeding", client={}))["client-underfeeding"]
    assert v.severity == "info"
    assert evidence(v)["client in flight / limit"] == "unknown"
    assert v.changes == ()  # no --concurrency without the client's limit it would rest on


def test_no_underfeeding_when_the_client_is_below_its_limit() -> None:
    found = verdicts(observe("underfeeding", client={"inflight": 8, "limit": 64}))
    assert "client-underfeeding" not in found and "under-fed" in found


def test_server_down() -> None:
    obs = observe("underfeeding", scrapes=[None, None, None])
    v = verdicts(obs, DoctorSpec(down_after_s=2))["server-down"]
    assert v.severity == "critical"
    assert "connection refused" in v.summary
    assert set(verdicts(obs, DoctorSpec(down_after_s=2))) == {"server-down"}
    assert "server-down" not in verdicts(obs, DoctorSpec(down_after_s=5))  # not down for long enough yet


def test_server_set_aside_by_the_client() -> None:
    obs = observe("underfeeding", client={"usable": False, "problem": "5 failures in a row, last: HTTP 500"})
    v = verdicts(obs)["server-down"]
    assert "HTTP 500" in v.summary


def test_flapping() -> None:
    doc = fixture("underfeeding")
    up = doc["scrapes"][0]
    obs = observe("underfeeding", scrapes=[up, None, up, None, up])
    v = verdicts(obs)["flapping"]
    assert evidence(v)["up/down changes"].startswith("4 in")


def test_client_bound() -> None:
    process = {"cpu": 0.97, "loop_lag_s": 0.4, "completions_s": 120.0}
    found = verdicts(observe("underfeeding", client={"inflight": 8, "limit": 64}, process=process))
    v = found["client-bound"]
    assert v.servers == ()
    assert evidence(v)["client CPU"] == "97% of one core"
    assert v.changes == ("--api sglang-generate",)
    assert "client-underfeeding" not in found


RECORDED = ("kv_bound", "retractions", "idle", "underfeeding", "compute_bound")


def test_each_fixture_says_where_it_comes_from() -> None:
    """Recorded from a real server (SGLang by scripts/record_doctor_fixtures.py, or the vLLM recording), or written
    from SGLang's metric definitions where no small real server shows the situation; kv_bound and retractions are
    recorded."""
    for path in sorted(FIXTURES.glob("*.yaml")):
        about = fixture(path.stem)["about"]
        assert about.startswith(("Recorded from a real SGLang 0.5.23 CPU server", "Written from SGLang's metric")) or (
            about.startswith("The recorded vLLM")
        ), (path.stem, about)
    for name in RECORDED:
        assert fixture(name)["about"].startswith("Recorded from a real SGLang 0.5.23 CPU server"), name


FIRES = {
    "state_bound_no_buffer": "state-pool-bound",
    "state_bound_extra_buffer": "state-pool-bound",
    "state_pool_full": "state-pool-bound",
    "kv_bound": "kv-bound",
    "idle": "idle",
    "retractions": "retractions",
    "vllm_preemptions": "retractions",
    "scheduler_conservative": "scheduler-conservative",
    "compute_bound": "running-cap",
    "prefill_heavy": "prefill-heavy",
    "underfeeding": "client-underfeeding",
}


@pytest.mark.parametrize("name", sorted(FIRES))
def test_each_fixture_fires_its_rule(name: str) -> None:
    assert FIRES[name] in verdicts(observe(name))


def test_every_rule_is_covered() -> None:
    # built from fixtures above; compute-bound needs the planner's roofline (tests/unit/doctor/test_doctor_ranking.py),
    # truncated the client's answers alone (tests/unit/doctor/test_truncation.py), queue-timeout the client's timeouts
    # (tests/unit/run/test_overload.py), uploads-behind the upload backlog (tests/unit/run/test_upload_health.py)
    covered = set(FIRES.values()) | {"server-down", "flapping", "client-bound", "compute-bound", "truncated"}
    covered |= {"queue-timeout", "uploads-behind"}
    covered |= {"under-fed"}  # the underfeeding fixture with the client below its limit (test_full_server.py)
    covered |= {"work-timeout", "monitoring-gap"}  # tests/unit/run/test_overload.py, test_monitoring_gap.py
    assert covered == set(RULE_IDS)


def test_underfeeding_prediction_keeps_the_servers_flags() -> None:
    # a twin-like server with the radix cache off and an explicit cap: raising the client's concurrency
    # fills today's cap; the planner must not resize the server as it does for a radix-off recommendation
    info = {
        "model_path": "qwen3.6-35b-a3b",
        "disable_radix_cache": True,
        "max_running_requests": 64,
        "mem_fraction_static": 0.88,
        "internal_states": [{"effective_max_running_requests_per_dp": 64}],
        "tokenmill_sim": {"gpu": "h200"},
    }
    v = verdicts(observe("underfeeding", server_info=info), model="qwen3.6-35b-a3b", gpu="h200")
    p = v["client-underfeeding"].predictions[0]
    assert p.source == "planner" and p.what == "running"
    assert (p.before.max_running, p.after.max_running) == (8, 64)
    assert p.after.tok_s_per_gpu and p.before.tok_s_per_gpu and p.after.tok_s_per_gpu > p.before.tok_s_per_gpu


def test_a_kv_pool_that_cannot_take_one_more_full_length_request_is_kv_bound() -> None:
    """SGLang admits a request only if its prompt and its max_tokens fit: with long requests the KV pool binds
    while its gauge shows room (seen on a real 0.5.23 server: 2 of 1,024 running, KV at 45%, 14 queued). Of
    max_tokens SGLang counts at most 4,096 (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION): a long limit alone does not
    fill the pool."""
    roomy = verdicts(observe("scheduler_conservative", process={"max_tokens": 4096, "avg_prompt_tokens": 500}))
    assert "scheduler-conservative" in roomy and "kv-bound" not in roomy
    clipped = verdicts(observe("scheduler_conservative", process={"max_tokens": 48000, "avg_prompt_tokens": 500}))
    assert "scheduler-conservative" in clipped and "kv-bound" not in clipped
    long_ignore_eos = {"max_tokens": 48000, "avg_prompt_tokens": 45000, "ignore_eos": True}
    found = verdicts(observe("scheduler_conservative", process=long_ignore_eos))
    assert "scheduler-conservative" not in found
    v = found["kv-bound"]
    assert evidence(v)["requests that fit at full length"] == "33 x 49,096 tokens in 1,640,000"
    assert "--kv-cache-dtype fp8_e4m3" in v.changes
    assert not any("mamba" in c for c in v.changes)  # a dense server gets no state-pool advice


def test_ordinary_requests_are_not_held_back_by_their_whole_limit() -> None:
    """SGLang 0.5.23 reserves the whole remaining output only for ignore_eos requests; ordinary ones reserve the
    new-token ratio of it (0.098 once settled) beside what they hold, so the same long requests with room in the
    pool are not KV-bound at admission (seen on a real server: 3 run where 2 fit at full length)."""
    ordinary = verdicts(observe("scheduler_conservative", process={"max_tokens": 48000, "avg_prompt_tokens": 45000}))
    assert "kv-bound" not in ordinary
