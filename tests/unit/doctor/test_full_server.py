"""The doctor sees a full server: a queue while running is below the cap and the KV pool is high is the KV pool's
admission (not "no problem found"); an idle or under-fed server is called so; a verdict shows the statistic it was
decided on; and a change is proposed only with the evidence it rests on."""

from __future__ import annotations

from tests.helpers.doctor import URL, evidence, observe, verdicts
from tokenmill.config import DoctorSpec
from tokenmill.doctor import ClientObs, ClientSide, Observation, ServerObs, diagnose, format_verdicts
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import parse_server_info
from tokenmill.monitor.scrape import ServerSnapshot

SERVER_INFO = {
    "model_path": "qwen3.6-27b",
    "max_total_num_tokens": 1_200_000,
    "mem_fraction_static": 0.85,
    "internal_states": [{"effective_max_running_requests_per_dp": 85}],
}


def seen(
    running: float, peak: float, queued: float, kv: float, side: ClientSide | None = None, least: float | None = None
) -> Observation:
    """One server as the monitor's window saw it: mean running, its peak, mean queue (its least), KV usage."""
    view = ServerView(
        URL,
        ServerSnapshot("sglang", 0.0, True),
        parse_server_info(SERVER_INFO),
        True,
        None,
        running=running,
        running_peak=peak,
        queued=queued,
        queued_min=queued if least is None else least,
        kv_usage=kv,
        state_usage=None,
        max_running=85,
        decode_tok_s=1100.0,
        requests_s=0.4,
    )
    return Observation((ServerObs(view, side or ClientSide()),), ClientObs())


def test_a_queue_below_the_cap_with_the_kv_pool_high_is_kv_admission_not_no_problem() -> None:
    """52/85 running, 19 queued, KV at 87 %: said "no problem found: nothing binds harder than the GPUs"."""
    obs = seen(52, 60, 19, 0.87)
    found = diagnose(obs, DoctorSpec())
    assert [v.rule for v in found] == ["kv-bound"]
    v = found[0]
    assert v.binds == "KV cache"
    assert evidence(v)["held back by"] == "the KV pool is high while running is below the cap"
    assert evidence(v)["running / max running"] == "52/85 (mean; peak 60)"
    assert evidence(v)["KV pool usage"] == "87%"
    assert v.summary == "19 queued while running 52/85 (mean; peak 60); KV pool 87%"
    assert v.changes == ("--mem-fraction-static 0.88", "--kv-cache-dtype fp8_e4m3")  # the outputs' own first
    text = format_verdicts(found, 1)
    assert "no problem found" not in text
    assert text.startswith("binding resource: KV cache (KV bound)")


def test_a_cap_reached_only_at_the_peak_beside_a_high_kv_pool_is_the_kv_pool() -> None:
    """It judged "at its running cap" on the window's peak (85) while showing the mean (36/85)."""
    found = {v.rule: v for v in diagnose(seen(36, 85, 19, 0.87), DoctorSpec())}
    assert "running-cap" not in found and "kv-bound" in found


def test_the_running_cap_verdict_shows_the_peak_it_was_decided_on() -> None:
    found = {v.rule: v for v in diagnose(seen(36, 85, 19, 0.30), DoctorSpec())}
    v = found["running-cap"]
    assert evidence(v)["running / max running"] == "36/85 (mean; peak 85)"
    assert v.summary.startswith("running 36/85 (mean; peak 85) at its cap with 19 queued")


def test_an_idle_server_is_called_idle_not_no_problem() -> None:
    found = diagnose(observe("idle"), DoctorSpec())
    assert [v.rule for v in found] == ["idle"]
    v = found[0]
    assert (v.title, v.binds, v.severity, v.changes) == ("idle", "", "info", ())  # no load: nothing binds
    assert v.summary == "nothing running, 0 queued, 0 decode tok/s: no work is sent"
    text = format_verdicts(found, 1)
    assert "no problem found" not in text and text.startswith("binding resource: none (no verdict names a resource)")
    assert "i  idle on http://10.0.0.7:30000 (binds: none)" in text
    assert "the planner's predictions need" not in text  # no change to predict: no hint about predictions


def test_a_server_the_client_feeds_below_its_limit_is_under_fed() -> None:
    found = verdicts(observe("underfeeding", client={"inflight": 8, "limit": 64}))
    assert set(found) == {"under-fed"}
    v = found["under-fed"]
    assert evidence(v)["client in flight / limit"] == "8/64 (below its limit)"
    assert evidence(v)["requests the pools hold"] == "64: the running cap (64)"
    assert v.changes == () and v.binds == ""  # a run's tail: it says nothing of what bound the run


def test_no_concurrency_is_proposed_when_the_clients_side_is_unknown() -> None:
    """At a run's tail it proposed --concurrency 107 (+1455 %) while saying "client in flight unknown"."""
    v = verdicts(observe("underfeeding", client={}))["client-underfeeding"]
    assert evidence(v)["client in flight / limit"] == "unknown"
    assert v.changes == () and v.predictions == () and v.impact is None
    assert " -> " not in v.line()
    assert "concurrency to about" not in v.advice and "Whether the client holds back is unknown" in v.advice


def test_kv_admission_proposes_a_max_tokens_near_the_answers_first() -> None:
    """The recorded server (4 of 64 run, 8 wait, KV 5-46 %): the answers seen (median 200, p90 400 of a limit of
    1,984) fit a limit of 1,024 that cuts about 1 % of them; that comes before more KV memory and the fp8 KV."""
    process: dict[str, object] = {"max_tokens": 1984, "avg_prompt_tokens": 60, "ignore_eos": True}
    process |= {"completed_p50": 200.0, "completed_p90": 400.0}
    v = verdicts(observe("kv_bound", process=process))["kv-bound"]
    assert v.changes == ("--max-tokens 1024", "--max-total-tokens 16384", "--kv-cache-dtype fp8_e4m3")
    assert v.kinds == ("client", "server", "server")
    assert evidence(v)["answers not cut: median / p90 (client)"] == "200 / 400"
    assert "here 1,024" in v.advice


def test_with_the_trainers_length_known_the_max_tokens_fix_is_what_it_holds() -> None:
    """The drafter is trained on sequences of up to 1,024 tokens: a 60-token prompt leaves 964 for the answer."""
    process = {"max_tokens": 1984, "avg_prompt_tokens": 60, "ignore_eos": True, "train_max_length": 1024}
    v = verdicts(observe("kv_bound", process=process))["kv-bound"]
    assert v.changes[0] == "--max-tokens 964" and v.kinds[0] == "client"
    assert "what the trainer's 1,024 tokens hold after the prompt" in v.caveats[0]


def test_a_queue_that_never_emptied_shows_its_least_beside_its_mean() -> None:
    """Conservative admission is decided on the queue never emptying: its least is shown with the mean."""
    v = {x.rule: x for x in diagnose(seen(40, 40, 50, 0.25, least=30), DoctorSpec())}["scheduler-conservative"]
    assert evidence(v)["queue"] == "50 (mean; least 30)"
