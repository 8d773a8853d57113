"""The doctor on six staged twin fleets (the twin's own scheduler and /metrics in virtual time, tests/stage.py):
state-pool bound, KV bound, a client under-feeding, compute bound, a dead server, prefill-heavy. Each must give
the right headline with a predicted gain, and no advice that cannot apply or cannot help. Then one test per
defect the doctor had: the ranking, the pools bounding concurrency advice, explicit flags in the "before"
picture, "at its running cap" against "compute bound", +0 % advice, a dead server's rate in the fleet's totals,
per-server tokens in `tokenmill status` mid-run, and the one-shot doctor's sampling.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.dispatch import prompts
from tests.helpers.stage import Load, Stage, fleet, stage
from tests.helpers.watch import dispatcher, job
from tokenmill.config import DoctorSpec
from tokenmill.doctor import DoctorState, Observation, PlannerPredictor, Verdict, diagnose, format_verdicts
from tokenmill.doctor.engine import headline, touches_state
from tokenmill.doctor.oneshot import Settling
from tokenmill.doctor.outputs import WARNING as OUTPUT_WARNING
from tokenmill.monitor.fleet import ServerView
from tokenmill.report.status import read_status
from tokenmill.run.progress import Tracker
from tokenmill.run.watch import RunMonitor

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"  # a 27B GDN hybrid, SGLang's default flags (extra_buffer)
SPEC = DoctorSpec()


def doctor(obs: Observation) -> list[Verdict]:
    return diagnose(obs, SPEC, PlannerPredictor())


def sound(verdicts: list[Verdict], obs: Observation) -> Verdict:
    """The headline, after checking what must hold of every verdict: no change predicted not to help, no
    recurrent-state flag for a server without a state pool."""
    dense = {s.url for s in obs.servers if s.view.info is not None and s.view.info.hybrid is False}
    for v in verdicts:
        for p in v.predictions:
            assert p.gain is None or p.gain >= SPEC.min_gain, (v.rule, p.text())
        if set(v.servers) & dense:
            assert not any(touches_state(c) for c in v.changes), (v.rule, v.changes)
    top = headline(verdicts)
    assert top is not None and top.impact is not None and top.impact > 0, [x.line() for x in verdicts]
    assert top is verdicts[0]
    return top


# ---- the six situations ---------------------------------------------------------------------------------


def test_state_pool_bound_hybrid_is_told_to_turn_the_radix_cache_off() -> None:
    obs = stage(fleet(2, MODEL, GPU, "", Load(1024, 1024, 64)))
    top = sound(doctor(obs), obs)
    assert (top.rule, top.binds) == ("state-pool-bound", "state pool")
    assert top.changes[0].startswith("--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests")
    p = top.predictions[0]
    assert p.source == "planner" and p.before.max_running == 15 and p.gain is not None and p.gain > 1.0


def test_a_dense_server_with_a_full_kv_pool_gets_kv_advice_and_no_state_flag() -> None:
    obs = stage(fleet(2, "qwen3-32b", GPU, "", Load(4096, 2048, 64, max_tokens=4096)))
    verdicts = doctor(obs)
    top = sound(verdicts, obs)
    assert (top.rule, top.binds) == ("kv-bound", "KV cache")
    # the change that keeps the model's outputs first; the fp8 KV cache (it changes them) after it, apart
    assert top.changes[0].startswith("--mem-fraction-static")
    assert top.changes[-1] == "--kv-cache-dtype fp8_e4m3"
    assert not any("mamba" in c for v in verdicts for c in v.changes)


def test_under_feeding_advice_is_bounded_by_what_the_pools_hold() -> None:
    """24 in flight on a dense server whose auto cap is 2,048 but whose KV pool holds a few dozen such requests:
    raise concurrency to about what the pools hold, not to 1.25 x 2,048."""
    obs = stage(fleet(1, "llama-3.1-8b", "h100", "", Load(6000, 4000, 24, max_tokens=8000)))
    top = sound(doctor(obs), obs)
    assert top.rule == "client-underfeeding" and top.kinds[0] == "client"
    held = dict(top.evidence)["requests the pools hold"]
    hold = int(held.split(":")[0])
    assert held.split(": ", 1)[1].startswith("the KV pool") and 24 < hold < 100, held
    want = int(top.changes[0].split()[-1])
    assert hold < want <= 1.25 * hold + 1 and obs.servers[0].view.max_running == 2048
    p = top.predictions[0]
    assert (p.what, p.before.max_running) == ("running", 24) and hold <= p.after.max_running <= want


def test_compute_bound_only_where_the_roofline_says_compute() -> None:
    obs = stage(fleet(1, "llama-3.1-8b", "l40s", "--max-running-requests 1024", Load(16, 16, 1500, max_tokens=32)),
                seconds=60)  # fmt: skip
    top = sound(doctor(obs), obs)
    assert (top.rule, top.binds) == ("compute-bound", "compute")
    assert obs.servers[0].view.running == 1024
    assert dict(top.evidence)["decode step (roofline)"] == "compute (planner)"
    assert top.changes == ("--quantization fp8",) and (top.predictions[0].gain or 0) > 0.5


def test_a_dead_server_is_the_headline_and_leaves_the_fleets_totals_at_once() -> None:
    servers = fleet(4, MODEL, GPU, "--disable-radix-cache --max-running-requests 100", Load(1024, 1024, 100))
    run = Stage(servers)
    run.run(120)
    servers[3].up = False
    obs = run.run(30)  # ten more scrapes, server 3 dead in each
    top = sound(doctor(obs), obs)
    assert (top.rule, top.servers) == ("server-down", (servers[3].url,))
    p = top.predictions[0]
    assert p.scope == "fleet" and p.what == "servers up" and (p.before.max_running, p.after.max_running) == (3, 4)
    assert top.impact == pytest.approx(1 / 3, rel=0.05)
    dead = obs.servers[3].view
    assert not dead.healthy and dead.decode_tok_s == 0.0  # its last window's rate is not counted on
    live = sum(s.view.decode_tok_s or 0 for s in obs.servers[:3])
    assert sum(s.view.decode_tok_s or 0 for s in obs.servers) == live


def test_prefill_heavy_is_the_headline_when_prefill_dominates() -> None:
    """8K-token prompts, 64-token answers: the KV/state levers gain a few per cent, faster prefill doubles it."""
    obs = stage(fleet(2, MODEL, GPU, "", Load(8192, 64, 64)))
    verdicts = doctor(obs)
    top = sound(verdicts, obs)
    assert (top.rule, top.binds) == ("prefill-heavy", "prefill")
    share = dict(top.evidence)["prefill share of GPU time (planner)"]
    assert int(share.rstrip("%")) >= 50
    # fp8 weights carry the gain, and change the model's outputs: listed after the changes that keep them
    assert top.best_change() == "--quantization fp8" == top.changes[-1]
    others = [v for v in verdicts if v is not top]
    assert others and all((v.impact or 0) < (top.impact or 0) / 4 for v in others), [v.line() for v in others]


# ---- one test per defect ------------------------------------------------------------------------------


def test_verdicts_are_ranked_by_impact_not_by_the_table() -> None:
    obs = stage(fleet(2, MODEL, GPU, "", Load(8192, 64, 64)))
    verdicts = doctor(obs)
    rules = [v.rule for v in verdicts]
    assert rules.index("prefill-heavy") < rules.index("state-pool-bound")  # the table has them the other way
    impacts = [v.impact for v in verdicts if v.impact is not None]
    assert impacts == sorted(impacts, reverse=True)
    state = DoctorState(confirm=1)
    state.update(verdicts)
    assert [v.rule for v in state.shown] == rules
    # a headline yields to a clearly larger impact only: no flapping between two close verdicts
    top, second = state.shown[0], state.shown[1]
    close = replace(second, impact=(top.impact or 0) * 1.05)
    assert not state.update([top, close]) and state.shown[0].rule == top.rule
    clear = replace(second, impact=(top.impact or 0) * 1.5)
    assert state.update([top, clear]) and state.shown[0].rule == second.rule
    text = format_verdicts(verdicts, 2)
    assert text.startswith("binding resource: prefill (prefill heavy); best change: --quantization fp8, +")
    assert text.splitlines()[0].endswith(f"({OUTPUT_WARNING})")


def test_explicit_max_running_stays_in_the_before_picture_and_fp8_weights_are_a_change() -> None:
    obs = stage(fleet(1, "llama-3.1-8b", "h100", "--max-running-requests 512", Load(200, 200, 700)), seconds=60)
    top = sound(doctor(obs), obs)
    assert top.rule == "running-cap"
    fp8 = top.prediction("--quantization fp8")
    assert fp8 is not None and fp8.before.max_running == 512 and fp8.note is None and (fp8.gain or 0) > 0.1
    assert all(p.before.max_running == 512 for p in top.predictions)


def test_a_server_at_its_cap_with_a_memory_bound_step_is_at_its_running_cap_not_compute_bound() -> None:
    """Radix cache off with a cap of 60: the state pool is sized to the cap (full by construction), the decode
    step is memory-bound: the verdict says the cap binds, and the planner sizes the larger cap."""
    obs = stage(fleet(1, MODEL, GPU, "--disable-radix-cache --max-running-requests 60", Load(1024, 1024, 128)))
    verdicts = doctor(obs)
    top = sound(verdicts, obs)
    assert (top.rule, top.title) == ("running-cap", "at its running cap")
    assert "compute-bound" not in {v.rule for v in verdicts}
    assert dict(top.evidence)["decode step (roofline)"] == "memory (planner)"
    assert obs.servers[0].view.state_usage == pytest.approx(1.0)
    bigger = next(c for c in top.changes if c.startswith("--max-running-requests"))
    assert int(bigger.split()[-1]) > 60


def test_a_change_predicted_to_gain_nothing_is_not_shown() -> None:
    """At the planner's own best radix-off cap, a larger cap gains nothing: it is dropped, not shown at +0 %."""
    obs = stage(fleet(1, MODEL, GPU, "--disable-radix-cache --max-running-requests 100", Load(1024, 1024, 160)))
    verdicts = doctor(obs)
    sound(verdicts, obs)
    assert not any(c.startswith("--max-running-requests") for v in verdicts for c in v.changes)
    assert all(p.gain is None or p.gain > 0 for v in verdicts for p in v.predictions)


async def test_status_mid_run_shows_each_servers_output_tokens(tmp_path: Path) -> None:
    spec = job(tmp_path, event_interval_s=0.001)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "job.json").write_text("{}")
    d = dispatcher(spec)
    mon = RunMonitor(spec, d, tmp_path / "out", "run1")
    tracker = Tracker(d)
    await mon.start(total=40, done_before=0)
    assert await d.run(prompts(12))  # the first 12 of 40: the run goes on
    tracker.total = 40
    mon.tick(tracker.snapshot(mon.state()))
    st = read_status(tmp_path / "out")
    assert st.state == "running"
    (server,) = st.summary.servers
    assert server.client_tokens == 60 and server.completed == 12  # 5 output tokens each
    assert "| http://127.0.0.1:9 | 12 | 0 | 60 |" in st.summary.markdown()
    await mon.stop(tracker.snapshot(mon.state()), finished=False)


def _views(decode: float, prompt: float) -> list[ServerView]:
    return [ServerView("u", None, None, True, None, decode_tok_s=decode, prompt_tok_s=prompt)]


def test_one_shot_sampling_goes_on_until_the_rates_settle_or_says_how_noisy_they_are() -> None:
    settling = Settling(0.1)
    # rates over the whole sampling so far, as the monitor gives them: prefill comes in bursts
    for t, prompt in ((0, 1329.0), (2, 58403.0), (4, 49407.0), (6, 30000.0)):
        settling.add(t, _views(1000.0, prompt))
    assert not settling.settled()
    assert "had not settled" in settling.text() and "prompt tok/s by" in settling.text()
    for t in range(8, 40, 2):
        settling.add(t, _views(1000.0, 30000.0 + 10 * t))
    assert settling.settled() and settling.text().endswith("settled within 10%")
    spread = settling.spread()
    assert spread is not None and spread["decode tok/s"] == 0.0


def test_the_fleets_decode_total_drops_a_dead_server_at_once(tmp_path: Path) -> None:
    """The dashboard's "servers decode" (the snapshot's fleet total): the live servers' rates, from the first scrape
    that finds a server dead (its last window's rate is not carried on)."""
    servers = fleet(2, MODEL, GPU, "", Load(1024, 1024, 32))
    spec = job(tmp_path).model_copy(update={"servers": [s.url for s in servers]})
    mon = RunMonitor(spec, dispatcher(spec), tmp_path, "run1")
    tracker = Tracker(mon.dispatcher)
    for t in range(0, 91, 3):
        for s in servers:
            s.run_until(float(t))
            mon.fleet.ingest(s.url, s.scrape(), s.info)
    both = tracker.snapshot(mon.state()).decode_tok_s
    servers[1].up = False
    servers[0].run_until(93.0)
    servers[1].now = 93.0
    for s in servers:
        mon.fleet.ingest(s.url, s.scrape(), s.info)
    snap = tracker.snapshot(mon.state())
    live = snap.servers[0].decode_tok_s
    assert both is not None and live is not None and live > 0.3 * both
    assert snap.servers[1].decode_tok_s == 0.0 and snap.decode_tok_s == live
