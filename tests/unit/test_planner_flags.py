"""SGLang flag parsing (real spellings, old and new strategy names) and rendering back."""

from __future__ import annotations

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.flags import command_line, parse_flags, render_flags


def test_old_and_new_strategy_spellings() -> None:
    old = parse_flags("--mamba-scheduler-strategy extra_buffer")
    new = parse_flags("--mamba-radix-cache-strategy=extra_buffer_lazy")
    assert (old.mamba_strategy, old.strategy_flag) == ("extra_buffer", "--mamba-scheduler-strategy")
    assert (new.mamba_strategy, new.strategy_flag) == ("extra_buffer_lazy", "--mamba-radix-cache-strategy")
    assert render_flags(new) == ["--mamba-radix-cache-strategy", "extra_buffer_lazy"]


def test_a_full_launch_line() -> None:
    f = parse_flags(
        "SGLANG_MAMBA_SSM_DTYPE=bfloat16 python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B "
        "--tp 2 --mem-fraction-static 0.9 --disable-radix-cache --max-running-requests 128 "
        "--kv-cache-dtype fp8_e4m3 --quantization fp8 --enable-metrics --host 0.0.0.0"
    )
    assert f.mamba_ssm_dtype == "bf16"
    assert f.model_path == "Qwen/Qwen3.6-27B"
    assert (f.tp_size, f.mem_fraction_static, f.max_running_requests) == (2, 0.9, 128)
    assert f.disable_radix_cache and f.kv_cache_dtype == "fp8" and f.weight_dtype == "fp8"
    assert f.ignored == ("--enable-metrics", "--host 0.0.0.0")


def test_a_list_of_strings_is_joined() -> None:
    f = parse_flags(["--mem-fraction-static 0.85", "--mamba-ssm-dtype", "float16"])
    assert (f.mem_fraction_static, f.mamba_ssm_dtype) == (0.85, "fp16")


def test_env_assignments() -> None:
    f = parse_flags("SGLANG_MAMBA_CONV_DTYPE=float32 SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 FOO=bar")
    assert f.mamba_conv_dtype == "fp32" and f.skip_decode_lock
    assert f.ignored == ("FOO=bar",)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--mem-fraction-static", "needs a value"),
        ("--mem-fraction-static high", "takes a number"),
        ("--mem-fraction-static 1.5", "between 0 and 1"),
        ("--max-running-requests -4", "must not be negative"),
        ("--mamba-scheduler-strategy fast", "use one of"),
        ("--mamba-ssm-dtype int8", "use one of"),
        ("--tp-size 0", "at least 1"),
        ("--mamba-scheduler-strategy extra_buffer_lazy --disable-overlap-schedule", "requires the overlap"),
        ("--enable-dp-attention", "not modeled"),
        ('--flags "unclosed', "quotes"),
    ],
)
def test_bad_flags_say_what_to_fix(flags: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_flags(flags)


def test_render_then_parse_round_trips() -> None:
    text = (
        "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 --tp-size 4 --quantization fp8 --mem-fraction-static 0.88 "
        "--mamba-scheduler-strategy no_buffer --disable-radix-cache --max-running-requests 300 "
        "--mamba-ssm-dtype bfloat16 --kv-cache-dtype fp8_e4m3 --cuda-graph-max-bs 300 --page-size 64"
    )
    f = parse_flags(text)
    assert parse_flags(command_line(f)) == f
    assert command_line(parse_flags("")) == ""
