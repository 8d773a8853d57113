"""SGLang flag parsing (real spellings, old and new names) and rendering back for a given SGLang release."""

from __future__ import annotations

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.flags import (
    command_line,
    graph_bs_flag_for,
    parse_flags,
    render_flags,
    sglang_release,
    strategy_flag_for,
)


def test_old_and_new_strategy_spellings() -> None:
    old = parse_flags("--mamba-scheduler-strategy extra_buffer")
    new = parse_flags("--mamba-radix-cache-strategy=extra_buffer_lazy")
    assert (old.mamba_strategy, old.strategy_flag) == ("extra_buffer", "--mamba-scheduler-strategy")
    assert (new.mamba_strategy, new.strategy_flag) == ("extra_buffer_lazy", "--mamba-radix-cache-strategy")
    # without a version the spelling given is kept
    assert render_flags(new) == ["--mamba-radix-cache-strategy", "extra_buffer_lazy"]
    assert render_flags(old) == ["--mamba-scheduler-strategy", "extra_buffer"]


@pytest.mark.parametrize(
    ("version", "strategy_flag", "graph_flag"),
    [
        # read from the released wheels' server_args.py: new names from 0.5.14, old ones gone in 0.5.20
        ("0.5.10.post1", "--mamba-scheduler-strategy", "--cuda-graph-max-bs"),
        ("0.5.13", "--mamba-scheduler-strategy", "--cuda-graph-max-bs"),
        ("0.5.14", "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
        ("0.5.23", "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
        ("v0.6.0rc1", "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
        (None, "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),  # unknown: the newest spelling
        ("main", "--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
    ],
)
def test_spelling_for_a_version(version: str | None, strategy_flag: str, graph_flag: str) -> None:
    assert strategy_flag_for(version) == strategy_flag
    assert graph_bs_flag_for(version) == graph_flag


def test_versions_parse_leniently() -> None:
    assert sglang_release("0.5.23") == (0, 5, 23)
    assert sglang_release("v0.5.10.post1") == (0, 5, 10)
    assert sglang_release("0.5") == (0, 5, 0)
    assert sglang_release("0.5.14rc2") == (0, 5, 14)
    assert sglang_release("nightly") is None and sglang_release(None) is None


def test_command_line_renders_for_the_version_asked() -> None:
    f = parse_flags("--mamba-scheduler-strategy no_buffer --disable-overlap-schedule --cuda-graph-max-bs 64")
    assert command_line(f, "0.5.23") == (
        "--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule --cuda-graph-max-bs-decode 64"
    )
    assert command_line(f, "0.5.11") == (
        "--mamba-scheduler-strategy no_buffer --disable-overlap-schedule --cuda-graph-max-bs 64"
    )


def test_both_graph_spellings_and_the_graph_switches_parse() -> None:
    assert parse_flags("--cuda-graph-max-bs 96").cuda_graph_max_bs == 96
    assert parse_flags("--cuda-graph-max-bs-decode=32").cuda_graph_max_bs == 32
    assert parse_flags("--disable-cuda-graph").disable_cuda_graph
    assert parse_flags("--disable-piecewise-cuda-graph").disable_prefill_graph  # the pre-0.5.14 name
    assert parse_flags("--cuda-graph-backend-prefill disabled").disable_prefill_graph
    assert not parse_flags("--cuda-graph-backend-prefill breakable").disable_prefill_graph
    assert parse_flags("--cuda-graph-backend-decode disabled").disable_decode_graph


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
        ("--cuda-graph-backend-prefill off", "use one of"),
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
