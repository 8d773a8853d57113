"""A twin's rates beside the planner's: a simulated server at time scale s decodes 1/s times as fast as the GPU
it stands for, so the doctor shows its measured rates with their value on the GPU's clock (the clock the
planner's predictions are on), and a real server's as they are."""

from __future__ import annotations

import re

import yaml

from tests.helpers.doctor import FIXTURES, observe, verdicts


def test_a_twins_measured_rates_carry_their_value_on_the_gpus_clock() -> None:
    info = yaml.safe_load((FIXTURES / "prefill_heavy.yaml").read_text())["server_info"]
    real = dict(verdicts(observe("prefill_heavy"))["prefill-heavy"].evidence)
    assert "twin" not in real["decode tok/s"] and "twin" not in real["prompt tok/s"]
    twin_info = {**info, "tokenmill_sim": {"time_scale": 0.05}}
    twin = dict(verdicts(observe("prefill_heavy", server_info=twin_info))["prefill-heavy"].evidence)
    shown = re.fullmatch(r"([\d,.]+) \(a twin at time scale 0.05: ([\d,.]+) on the GPU's clock\)", twin["decode tok/s"])
    assert shown is not None, twin["decode tok/s"]
    measured, on_gpu = (float(g.replace(",", "")) for g in shown.groups())
    assert shown.group(1) == real["decode tok/s"]
    assert on_gpu == round(measured * 0.05) or abs(on_gpu - measured * 0.05) <= 0.05 * measured * 0.05 + 1
    assert "on the GPU's clock" in twin["prompt tok/s"]
