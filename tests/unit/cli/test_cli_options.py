"""One meaning per option across commands: the run's job overrides take what the job file takes, the planner's
model is ``--planner-model`` (its old spelling warned about), and the doctor knows the GPUs of ``--gpu-file``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.cli.options import field_of
from tokenmill.cli.run import OVERRIDES, _overrides, run
from tokenmill.config import JobSpec, load_job
from tokenmill.errors import ConfigError

GPUS = "gpus:\n  - {key: lab-card, name: Lab Card, memory_mib: 16384, bandwidth_gbs: 500, bf16_tflops: 80}\n"


def _job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"input: {{path: x.jsonl}}\nservers: [http://127.0.0.1:9]\noutput: {{dir: {tmp_path / 'out'}}}\n")
    return path


def _run_params(*args: str) -> dict[str, object]:
    with run.make_context("run", list(args)) as ctx:
        return dict(ctx.params)


def test_run_takes_concurrency_auto_as_the_job_file_does(tmp_path: Path) -> None:
    job_file = _job_file(tmp_path)
    auto = load_job(job_file, _overrides(**_run_params(str(job_file), "--concurrency", "auto")))
    fixed = load_job(job_file, _overrides(**_run_params(str(job_file), "--concurrency", "12")))
    assert (auto.concurrency, fixed.concurrency) == ("auto", 12)
    with pytest.raises(Exception, match="not a number"):
        _run_params(str(job_file), "--concurrency", "lots")


def test_every_override_is_a_field_of_the_job_and_says_which(tmp_path: Path) -> None:
    for key in OVERRIDES.values():
        field_of(JobSpec, key)  # a KeyError for a field the job does not have
    helps = {p.name: p.help or "" for p in run.params}
    assert all(f"({key})" in helps[name] for name, key in OVERRIDES.items())
    params = _run_params(
        str(_job_file(tmp_path)), "-o", "elsewhere", "--servers", "http://h:1", "--servers", "http://h:2"
    )
    assert _overrides(**params) == {"output.dir": "elsewhere", "servers": ["http://h:1", "http://h:2"]}


def test_the_doctor_knows_a_gpu_of_the_gpu_file(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(GPUS)
    common = ["doctor", "--servers", "http://127.0.0.1:1", "--gpu", "lab-card", "--samples", "2", "--interval", "0.1"]
    common += ["--max-seconds", "0.2", "--json"]
    refused = CliRunner().invoke(cli, common)
    assert isinstance(refused.exception, ConfigError) and "unknown GPU 'lab-card'" in str(refused.exception)
    found = CliRunner().invoke(cli, [*common, "--gpu-file", str(gpus)])
    assert found.exit_code == 0, found.output
    assert '"rule": "server-down"' in found.output  # it looked at the servers instead of refusing the GPU


def test_the_planner_model_keeps_its_old_spelling_with_a_warning() -> None:
    args = ["plan", "-g", "h100", "--no-what-if", "--json"]
    new = CliRunner().invoke(cli, [*args, "--planner-model", "qwen3.6-27b"])
    old = CliRunner().invoke(cli, [*args, "--model", "qwen3.6-27b"])
    assert new.exit_code == old.exit_code == 0
    assert "deprecated" not in new.stderr and "--model is deprecated here, it is now --planner-model" in old.stderr
    assert new.stdout == old.stdout
    both = CliRunner().invoke(cli, [*args, "--planner-model", "qwen3.6-27b", "--model", "qwen3-32b"])
    assert both.exit_code == 2 and "not both" in both.output


def test_export_and_report_write_to_a_file_given_by_to_and_the_old_o_still_works(tmp_path: Path) -> None:
    from tokenmill.cli.export import export_cmd

    with export_cmd.make_context("export", [str(tmp_path), "--format", "sharegpt", "--to", "a.jsonl"]) as ctx:
        assert str(ctx.params["dest"]) == "a.jsonl"
    with export_cmd.make_context("export", [str(tmp_path), "--format", "sharegpt", "-o", "b.jsonl"]) as ctx:
        assert str(ctx.params["renamed_dest"]) == "b.jsonl"  # merged into dest (with a warning) when it runs
