"""`tokenmill sim` as the twin: --gpu, --model, SGLang flags in --flags or after the options."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from tokenmill.cli.sim import build_config, sim
from tokenmill.errors import ConfigError


def parse(args: list[str]) -> click.Context:
    """The command line as click reads it (without running the server)."""
    return sim.make_context("sim", args)


def test_sglang_flags_after_the_options_become_engine_flags() -> None:
    ctx = parse(
        ["--model", "qwen3.6-27b", "--gpu", "rtx-pro-6000", "--mamba-scheduler-strategy", "extra_buffer",
         "--mem-fraction-static=0.9", "--disable-radix-cache", "--port", "0"]
    )  # fmt: skip
    given = {k: v for k, v in ctx.params.items() if k not in ("config_file", "port_file")}
    cfg = build_config(None, given, ctx.args)
    assert (cfg.model, cfg.gpu, cfg.port) == ("qwen3.6-27b", "rtx-pro-6000", 0)
    assert cfg.engine_flags == "--mamba-scheduler-strategy extra_buffer --mem-fraction-static=0.9 --disable-radix-cache"


def test_flags_option_takes_a_quoted_string_and_trailing_flags_append_to_it() -> None:
    ctx = parse(["--gpu", "h100", "--flags", "--tp-size 2 --mem-fraction-static 0.85", "--page-size", "64"])
    assert ctx.params["engine_flags"] == "--tp-size 2 --mem-fraction-static 0.85"
    given = {k: v for k, v in ctx.params.items() if k not in ("config_file", "port_file")}
    cfg = build_config(None, given, ctx.args)
    assert cfg.engine_flags == "--tp-size 2 --mem-fraction-static 0.85 --page-size 64"


def test_sglang_flags_without_a_twin_are_an_error_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"No such option '--time-scal' \(in --time-scal 0\.1\).*--gpu"):
        build_config(None, {}, ["--time-scal", "0.1"])
    with pytest.raises(ConfigError, match=r"--disable-radix-cache.*--gpu"):
        build_config(None, {"engine_flags": "--disable-radix-cache"})


def test_twin_settings_come_from_the_config_file_too(tmp_path: Path) -> None:
    f = tmp_path / "twin.yaml"
    f.write_text("gpu: rtx-pro-6000\nmodel: qwen3.6-27b\nengine_flags: --mamba-scheduler-strategy no_buffer\n")
    cfg = build_config(str(f), {"time_scale": 0.01}, ["--mem-fraction-static", "0.9"])
    assert cfg.engine_flags == "--mamba-scheduler-strategy no_buffer --mem-fraction-static 0.9"
    assert cfg.time_scale == 0.01
