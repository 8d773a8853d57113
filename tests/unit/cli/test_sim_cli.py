"""`tokenmill sim` options: generated from SimSpec, layered over --config, no defaults of their own."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tokenmill.cli.sim import build_config, sim
from tokenmill.config import SimSpec
from tokenmill.errors import ConfigError


def _option(name: str) -> click.Option:
    [opt] = [p for p in sim.params if isinstance(p, click.Option) and f"--{name}" in p.opts]
    return opt


def test_every_scalar_field_has_an_option_without_a_default_of_its_own() -> None:
    for name in ("port", "time-scale", "max-running-requests", "max-queued-requests", "api-key", "error-rate"):
        assert _option(name).default is None
    assert _option("fault-seed").name == "faults__seed"
    assert _option("seed").name == "seed"
    assert "[default: 256]" in (_option("max-running-requests").help or "")
    assert "--no-instant" in _option("instant").secondary_opts


def test_given_options_override_the_file_which_overrides_simconfig(tmp_path: Path) -> None:
    f = tmp_path / "sim.yaml"
    f.write_text("time_scale: 0.5\nmax_running_requests: 8\nfaults:\n  error_rate: 0.2\n  seed: 4\n")
    cfg = build_config(str(f), {"max_running_requests": 16, "faults__drop_rate": 0.1, "port": None})
    assert (cfg.time_scale, cfg.max_running_requests) == (0.5, 16)
    assert (cfg.faults.error_rate, cfg.faults.drop_rate, cfg.faults.seed) == (0.2, 0.1, 4)
    assert cfg.output_len_mean == SimSpec().output_len_mean


def test_bad_values_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_running_requests"):
        build_config(None, {"max_running_requests": 0})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        build_config(str(bad), {})
    typo = tmp_path / "typo.yaml"
    typo.write_text("time_scal: 1\n")
    with pytest.raises(ConfigError, match=r"time_scal.*spelling"):
        build_config(str(typo), {})


def test_help_lists_the_generated_options() -> None:
    result = CliRunner().invoke(sim, ["--help"])
    assert result.exit_code == 0
    for flag in ("--time-scale", "--drop-rate", "--fault-seed", "--port-file", "--config"):
        assert flag in result.output
