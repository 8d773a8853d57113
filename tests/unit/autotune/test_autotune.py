"""The autotune controller against a scripted fleet: servers whose decode rate follows the flags they run, an
injected clock, and an actuator that records what it was asked to do. A round is fed every second; a re-flag
runs on the tuner's worker thread, which the test waits for (``wait_idle``) before the next round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.helpers.autotune import RADIX_OFF, SERVERS, ScriptedFleet, drive, tuned, verdict
from tokenmill.autotune.actuators import parse_change, profile_with, refusal
from tokenmill.autotune.loop import Phase
from tokenmill.autotune.measure import RateHistory, measure
from tokenmill.config import AutotuneSpec, FleetSpec
from tokenmill.doctor.model import MemoryRisk
from tokenmill.monitor.fleet import ServerView


def steps(events: list[dict[str, object]]) -> list[object]:
    return [e["step"] for e in events if e["step"] != "note"]


def test_a_change_that_pays_is_tried_on_one_server_then_rolled_out() -> None:
    fleet = ScriptedFleet(factor=2.5)
    tuner, events = tuned(fleet)
    drive(fleet, tuner, 19)
    assert fleet.calls == []  # not a whole window of numbers to compare with yet
    drive(fleet, tuner, 60)
    assert fleet.calls == [("apply", RADIX_OFF, ["http://s0"]), ("apply", RADIX_OFF, ["http://s1", "http://s2"])]
    assert steps(events) == ["canary", "canary-up", "keep", "rolled-out"]
    (change,) = tuner.changes
    assert change.outcome == "kept" and change.measured is not None
    assert change.measured.gain == pytest.approx(1.5, abs=0.05)
    assert change.measured.gain_vs_peers == pytest.approx(1.5, abs=0.05)
    assert change.measured.low(2.0) > 1.3  # the noise is small beside the gain
    assert tuner.phase is Phase.DONE and fleet.changed == set(SERVERS)


def test_a_change_predicted_to_help_that_does_not_is_rolled_back() -> None:
    fleet = ScriptedFleet(factor=0.8)
    tuner, events = tuned(fleet)
    drive(fleet, tuner, 80)
    assert fleet.calls == [("apply", RADIX_OFF, ["http://s0"]), ("revert", "", ["http://s0"])]
    assert steps(events) == ["canary", "canary-up", "roll-back", "rolled-back"]
    (change,) = tuner.changes
    assert change.outcome == "rolled back" and change.predicted_gain == pytest.approx(1.5)
    assert change.measured is not None and change.measured.gain == pytest.approx(-0.2, abs=0.03)
    assert fleet.changed == set()


def test_a_drift_of_the_whole_workload_does_not_make_a_useless_change_look_good() -> None:
    """Every server speeds up by 40 % when the canary changes (shorter prompts, say); the change itself does
    nothing: against its own before it gains 40 %, against its peers nothing, and it is rolled back."""
    fleet = ScriptedFleet(factor=1.0)
    fleet.drift = lambda t: 1.4 if fleet.changed else 1.0
    tuner, _ = tuned(fleet)
    drive(fleet, tuner, 80)
    (change,) = tuner.changes
    assert change.measured is not None
    assert change.measured.gain_self == pytest.approx(0.4, abs=0.05)
    assert change.measured.gain_vs_peers == pytest.approx(0.0, abs=0.03)
    assert change.outcome == "rolled back"


def test_an_unclear_result_is_measured_longer_then_rolled_back() -> None:
    fleet = ScriptedFleet(factor=1.04, noise=0.15)
    tuner, events = tuned(fleet)
    drive(fleet, tuner, 140)
    assert "extended" in steps(events)
    (change,) = tuner.changes
    assert change.outcome == "rolled back" and change.measured is not None
    assert change.measured.seconds == pytest.approx(60, abs=2)  # max_window_s, not more


def test_only_allowed_flags_and_dry_run_changes_nothing() -> None:
    fleet = ScriptedFleet()
    fleet.allow = ("max-running-requests",)
    tuner, events = tuned(fleet, max_changes=2)
    drive(fleet, tuner, 40)
    assert fleet.calls == [] and tuner.changes == []
    notes = [e["text"] for e in events if e["step"] == "note"]
    assert len(notes) == 1 and "--disable-radix-cache not in the profile's autotune.allow" in str(notes[0])

    fleet = ScriptedFleet()
    tuner, events = tuned(fleet, dry_run=True, max_changes=2)
    drive(fleet, tuner, 40)
    assert fleet.calls == []
    assert steps(events) == ["would-apply"]  # once: a change is never proposed twice
    assert tuner.changes[0].outcome == "would apply"


def test_a_change_above_the_memory_risk_it_may_take_is_not_tried() -> None:
    mfs = "--mem-fraction-static 0.94"
    high = MemoryRisk("high", 11.0, 5.5, 13.6)
    fleet = ScriptedFleet(allow=("mem-fraction-static",))
    tuner, events = tuned(fleet)
    drive(fleet, tuner, 40, [verdict(mfs, memory=high)])
    assert fleet.calls == [] and tuner.changes == []
    (note,) = [str(e["text"]) for e in events if e["step"] == "note"]
    assert "out-of-memory risk high: 5.5 GiB stays outside the pools (11.0 today)" in note
    assert note.endswith("(autotune.max_memory_risk)")

    fleet = ScriptedFleet(allow=("mem-fraction-static",))  # the profile takes the risk: the change is tried
    tuner, events = tuned(fleet, max_memory_risk="high")
    drive(fleet, tuner, 40, [verdict(mfs, memory=high)])
    assert fleet.calls[0] == ("apply", mfs, ["http://s0"])


def test_what_the_tuner_leaves_alone() -> None:
    fleet = ScriptedFleet()
    tuner, events = tuned(fleet, min_remaining_s=600)
    for _ in range(40):  # too small a gain; a verdict of some servers only; a planner picture that does not match
        tuner.round(
            fleet.views(),
            [verdict(gain=0.05), verdict("--max-running-requests 64", servers=SERVERS[:1]),
             verdict("--max-running-requests 80", note="the planner puts today's cap at 30, the server reports 15")],
        )  # fmt: skip
    for _ in range(40):  # the run ends too soon for any change to pay back
        tuner.round(fleet.views(), [verdict()], eta_s=100.0)
    assert fleet.calls == []
    notes = [str(e["text"]) for e in events if e["step"] == "note"]
    assert len(notes) == 3, notes  # the +5 % change is below the threshold: not a word about it
    assert "holds on http://s0 only" in notes[0] and "the planner puts today's cap at 30" in notes[1]
    assert "(autotune.min_verdict_share)" in notes[0]  # every refusal names the key that governs it
    assert "too soon to pay back (autotune.min_remaining_s)" in notes[2]


def test_measure_takes_the_noise_from_the_parts_of_the_window() -> None:
    history = RateHistory(keep_s=1000)
    tokens = {"a": 0.0, "b": 0.0}
    for t in range(0, 101):
        for url, rate in (("a", 100.0 if t <= 50 else 200.0), ("b", 100.0)):
            tokens[url] += rate * (1 + (0.1 if t % 2 else -0.1))
            history.add(float(t), [ServerView(url, None, None, True, None, decoded_tokens=tokens[url])])
    m = measure(history, "a", ["b"], (0.0, 50.0), (51.0, 100.0), parts=5)
    assert m is not None and m.gain == pytest.approx(1.0, abs=0.05) and m.gain_self == pytest.approx(1.0, abs=0.05)
    assert 0 < m.stderr < 0.05 and m.low(2) > 0.9
    assert measure(history, "a", ["b"], (-50.0, 0.0), (51.0, 100.0), parts=5) is None  # not watched then


def test_a_change_becomes_profile_flags_within_the_allow_list() -> None:
    assert parse_change("--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests 96") == {
        "mamba-radix-cache-strategy": "auto", "disable-radix-cache": True, "max-running-requests": 96,
    }  # fmt: skip
    assert parse_change("--schedule-conservativeness=0.3") == {"schedule-conservativeness": 0.3}
    allow = AutotuneSpec().allow
    assert refusal("--mamba-scheduler-strategy no_buffer --disable-overlap-schedule", allow) is None  # an alias
    assert "--quantization" in str(refusal("--quantization fp8", allow))
    assert "--mamba-ssm-dtype" in str(refusal("--mamba-ssm-dtype bfloat16", allow))
    assert "not a set of launch flags" in str(refusal("concurrency 80", allow))
    profile = FleetSpec(engine="sglang", model="m", flags={"mamba-scheduler-strategy": "extra_buffer", "x": 1})
    new = profile_with(profile, "--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests 96")
    assert new.flags == {"x": 1, "mamba-radix-cache-strategy": "auto", "disable-radix-cache": True,
                         "max-running-requests": 96}  # fmt: skip
    assert profile.flags == {"mamba-scheduler-strategy": "extra_buffer", "x": 1}


def test_a_change_of_the_models_outputs_is_never_tried_unless_the_profile_names_it() -> None:
    """The tuner allowed everything ("allow" naming every flag) still leaves --kv-cache-dtype fp8 alone: it
    changes the model's outputs, and only autotune.allow_output_changes lets it through."""
    fp8 = "--kv-cache-dtype fp8_e4m3"
    fleet = ScriptedFleet(allow=("kv-cache-dtype", "max-running-requests"))
    tuner, events = tuned(fleet)
    drive(fleet, tuner, 40, [verdict(fp8)])
    assert fleet.calls == [] and tuner.changes == []
    (note,) = [str(e["text"]) for e in events if e["step"] == "note"]
    assert "changes the model's outputs" in note and "autotune.allow_output_changes" in note

    fleet = ScriptedFleet(allow=("max-running-requests",))
    tuner, events = tuned(fleet, allow_output_changes=["kv-cache-dtype"])
    fleet.allow = ()
    tuner.actuator = _OutputsAllowed(fleet, ("kv-cache-dtype",))  # the fleet's refusal reads the same field
    drive(fleet, tuner, 40, [verdict(fp8)])
    assert fleet.calls[0] == ("apply", fp8, ["http://s0"])


class _OutputsAllowed:
    """A scripted fleet whose refusal is the fleet's own, with the profile's allow_output_changes."""

    def __init__(self, fleet: ScriptedFleet, outputs: Sequence[str]) -> None:
        self.fleet, self.outputs = fleet, outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def refuse(self, change: str) -> str | None:
        return refusal(change, self.fleet.allow, self.outputs)


def test_the_fleet_refuses_an_output_change_the_profile_does_not_name() -> None:
    allow = [*AutotuneSpec().allow, "kv-cache-dtype", "quantization"]
    assert "allow_output_changes" in str(refusal("--quantization fp8", allow))
    assert refusal("--quantization fp8", AutotuneSpec().allow, ["quantization"]) is None
    assert refusal("--max-running-requests 96", AutotuneSpec().allow) is None
