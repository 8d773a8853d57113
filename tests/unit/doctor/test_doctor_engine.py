"""The doctor around the rules: steady verdicts during a run, text and JSON output, flag edits, one-shot input."""

from __future__ import annotations

import json

from tests.helpers.doctor import observe
from tokenmill.config import DoctorSpec
from tokenmill.doctor import DoctorState, Verdict, binding, diagnose, format_verdict, format_verdicts
from tokenmill.doctor.advice import set_flag, slots_per_request
from tokenmill.doctor.oneshot import client_from_tick
from tokenmill.monitor.info import ServerInfo


def _verdict(rule: str) -> Verdict:
    return Verdict(rule, "x", rule, "warning", ("s",), 1, "numbers", (("k", "v"),), "do it")


def test_a_verdict_shows_after_confirm_rounds_and_clears_after_confirm_misses() -> None:
    state = DoctorState(confirm=2)
    a = _verdict("kv-bound")
    assert not state.update([a]) and state.shown == []  # one round is not enough
    assert state.update([a]) and [v.rule for v in state.shown] == ["kv-bound"]
    assert not state.update([]) and [v.rule for v in state.shown] == ["kv-bound"]  # one miss keeps it
    assert state.update([]) and state.shown == []


def test_a_blip_never_shows() -> None:
    state = DoctorState(confirm=2)
    for verdicts in ([_verdict("kv-bound")], [], [_verdict("kv-bound")], []):
        assert not state.update(verdicts)
    assert state.shown == []


def test_shown_verdicts_follow_the_rule_table_order() -> None:
    state = DoctorState(confirm=1)
    state.update([_verdict("prefill-heavy"), _verdict("server-down")])
    assert [v.rule for v in state.shown] == ["server-down", "prefill-heavy"]
    assert binding(state.shown) == "x"


def test_text_and_json_output() -> None:
    verdicts = diagnose(observe("state_bound_no_buffer"), DoctorSpec())
    text = format_verdicts(verdicts, 1)
    assert text.startswith("binding resource: state pool")
    block = format_verdict(verdicts[0])
    assert "evidence:" in block and "cap from the state pool" in block and "--disable-radix-cache" in block
    data = json.loads(json.dumps(verdicts[0].as_dict()))
    assert data["rule"] == "state-pool-bound" and data["changes"][0].startswith("--disable-radix-cache")
    assert data["predictions"][0]["after"]["max_running"] == 380
    bf16 = data["changes"].index("--mamba-ssm-dtype bfloat16")
    assert "less accurate than float32" in data["caveats"][bf16]
    assert "note: halves the SSM state per request" in block
    assert format_verdicts([], 3).startswith("no problem found on 3 server(s)")


def test_set_flag_replaces_values_and_switches() -> None:
    flags = ["--mamba-scheduler-strategy", "extra_buffer", "--max-running-requests", "64", "--disable-overlap-schedule"]
    out = set_flag(flags, "--max-running-requests", "128")
    assert out == [
        "--mamba-scheduler-strategy",
        "extra_buffer",
        "--disable-overlap-schedule",
        "--max-running-requests",
        "128",
    ]
    assert set_flag(out, "--disable-radix-cache", drop=["--mamba-scheduler-strategy"]) == [
        "--disable-overlap-schedule",
        "--max-running-requests",
        "128",
        "--disable-radix-cache",
    ]


def test_slots_per_request_follows_sglang() -> None:
    assert slots_per_request(ServerInfo(None, strategy="no_buffer", disable_radix_cache=False)) == 3
    assert slots_per_request(ServerInfo(None, strategy="extra_buffer", disable_radix_cache=False)) == 5
    no_overlap = ServerInfo(None, strategy="extra_buffer", disable_radix_cache=False, disable_overlap_schedule=True)
    assert slots_per_request(no_overlap) == 4
    assert slots_per_request(ServerInfo(None, strategy="extra_buffer", disable_radix_cache=True)) == 1
    assert slots_per_request(ServerInfo(None, strategy="auto", disable_radix_cache=False)) is None
    assert slots_per_request(None) is None


def test_client_side_from_an_event_log_tick() -> None:
    tick = {
        "client": {
            "completed": 10,
            "prompt_tokens": 2000,
            "total": 100,
            "done": 12,
            "skipped": 1,
            "cpu": 0.5,
            "output_len": {"bounds": [100, 200], "counts": [2, 8, 0], "sum": 1500, "count": 10},
        },
        "servers": [{"url": "http://a", "inflight": 8, "limit": 8, "usable": True}],
    }
    sides, client = client_from_tick(tick)
    assert sides["http://a"].inflight == 8 and sides["http://a"].limit == 8
    assert client.avg_prompt_tokens == 200 and client.avg_output_tokens == 150
    assert client.cpu == 0.5
