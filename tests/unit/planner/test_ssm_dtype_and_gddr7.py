"""The plan names the SSM state dtype it assumed and where from, and shows the other dtype's line; and the decode
rate at 64 running on one RTX PRO 6000 (Qwen3.6-27B) against the seed's measured ~1,180 tok/s, from the card's
published bandwidth and the GDDR7 efficiency measured on an RTX 5090 (docs/planner.md, Memory technology)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.config import PlannerSpec
from tokenmill.planner.capacity import server_capacity
from tokenmill.planner.hardware import GpuCatalog

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
SEED_TOK_S = 1180.0  # per GPU, the seed's run at ~72 running (answers of 2,660 tokens on average)
SEED_OUTPUT = 2660


def plan(*args: str) -> str:
    out = CliRunner().invoke(cli, ["plan", "-m", MODEL, "-g", GPU, *args], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output + repr(out.exception)
    return out.output


def test_the_plan_names_the_ssm_dtype_it_assumed_from_the_model_config_and_shows_bf16() -> None:
    """The seed's flags name no SSM dtype: SGLang 0.5.23 takes the model config's float32. The plan said 37
    running without saying which dtype it had assumed."""
    text = plan("--output-len", str(SEED_OUTPUT), "--input-len", "300")
    assert "SSM state: fp32, from the model config's mamba_ssm_dtype (SGLang 0.5.23: the flag, else the model " in text
    line = next(x for x in text.splitlines() if x.startswith("with bf16 state (--mamba-ssm-dtype bfloat16): "))
    assert "running (bound by state slots)" in line and "tok/s per GPU (+" in line and "ETA " in line


def test_a_flag_names_the_dtype_and_the_other_line_is_float32() -> None:
    body = json.loads(plan("--flags", "--mamba-ssm-dtype bfloat16", "--json"))
    ssm = body["ssm_state"]
    assert (ssm["dtype"], ssm["other"]["dtype"], ssm["other"]["flag"]) == ("bf16", "fp32", "--mamba-ssm-dtype float32")
    assert ssm["source"] == "the flags (--mamba-ssm-dtype or SGLANG_MAMBA_SSM_DTYPE)"
    assert ssm["other"]["plan"]["running"] < body["plan"]["running"]  # a float32 slot is larger: fewer run


def test_a_dense_model_has_no_ssm_line() -> None:
    out = CliRunner().invoke(cli, ["plan", "-m", "qwen3-32b", "-g", GPU, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["ssm_state"] is None


@pytest.mark.parametrize("prompt", [100, 300, 500])
def test_decode_at_64_running_is_within_10_percent_of_the_seed(prompt: int) -> None:
    """64 running (radix cache off, bf16 state: the dtype the seed's 72 running implies), requests of ``prompt``
    tokens with 2,660-token answers, each holding its prompt and half its answer on average. The rate rests on the
    card's 1,792 GB/s (NVIDIA's datasheet) and the GDDR efficiency (0.7 x 1.2, fitted on AccelMark's RTX 5090 and
    A100 runs), not on this number."""
    card = GpuCatalog.load().get(GPU)
    config = PlannerSpec()
    cap = server_capacity(MODEL, GPU, "--disable-radix-cache --max-running-requests 64 --mamba-ssm-dtype bfloat16")
    assert card.bandwidth_gbs == 1792 and card.is_gddr
    assert cap.roofline.eta_bw == pytest.approx(config.eta_bw * config.eta_bw_gddr_ratio)
    held = round(64 * (prompt + SEED_OUTPUT / 2))
    step = cap.step(64, held)
    assert step.bound == "memory"
    assert abs(step.tokens_per_s / SEED_TOK_S - 1) <= 0.10, step.tokens_per_s
    # with the float32 state SGLang's rule picks from the model config, the same step is a fifth slower
    fp32 = server_capacity(MODEL, GPU, "--disable-radix-cache --max-running-requests 64").step(64, held)
    assert fp32.tokens_per_s < 0.85 * step.tokens_per_s
