"""``tokenmill plan`` plans the run you will do: the requests' kind (--max-tokens, --ignore-eos), a job file's
requests and input (--job), a fleet profile's servers (--fleet); each option changes the numbers it should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import yaml
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.config import PlannerSpec
from tokenmill.planner import GpuCatalog, load_model, parse_flags, plan
from tokenmill.planner.plan import Workload

POOL = ("-m", "llama-3.1-8b", "-g", "rtx-pro-6000", "--flags", "--max-total-tokens 20000", "--no-what-if")


def run(*args: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["plan", *args, "--json"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    data: dict[str, Any] = json.loads(out.output)
    return data


def fails(*args: str) -> str:
    out = CliRunner().invoke(cli, ["plan", *args])
    assert out.exit_code != 0
    return out.output + str(out.exception)


def running(work: Workload, flags: str = "--max-total-tokens 20000") -> int:
    model, gpu = load_model("llama-3.1-8b"), GpuCatalog.load().get("rtx-pro-6000")
    return plan(model, gpu, parse_flags(flags), work, PlannerSpec()).running


def test_ignore_eos_plans_answers_that_run_to_max_tokens_and_reserve_all_of_it() -> None:
    lengths = ("--prompts", "1000", "--input-len", "500", "--max-tokens", "1500")
    eos = run(*POOL, *lengths, "--ignore-eos")
    ordinary = run(*POOL, *lengths, "--output-len", "1500")
    assert (eos["workload"]["ignore_eos"], eos["workload"]["output_len"]) == (True, 1500)
    assert eos["plan"]["running"] == running(Workload(1000, 500, 1500, max_tokens=1500, ignore_eos=True))
    assert ordinary["plan"]["running"] == running(Workload(1000, 500, 1500, max_tokens=1500))
    assert eos["plan"]["running"] < ordinary["plan"]["running"]
    assert "every answer runs to max_tokens (1500)" in fails(*POOL, *lengths, "--ignore-eos", "--output-len", "900")


def test_max_tokens_is_what_admission_charges_an_ordinary_request() -> None:
    lengths = ("--prompts", "1000", "--input-len", "500", "--output-len", "1000")
    tight, roomy = run(*POOL, *lengths, "--max-tokens", "1000"), run(*POOL, *lengths, "--max-tokens", "4000")
    assert tight["plan"]["running"] == running(Workload(1000, 500, 1000, max_tokens=1000))
    assert roomy["plan"]["running"] == running(Workload(1000, 500, 1000, max_tokens=4000))
    assert roomy["plan"]["running"] < tight["plan"]["running"]
    assert roomy["workload"]["max_tokens"] == 4000
    # without --output-len the mean output is the default, at most the limit
    assert run(*POOL, "--max-tokens", "600")["workload"]["output_len"] == 600


def write_job(tmp: Path, sampling: dict[str, Any], **extra: Any) -> Path:
    data = tmp / "in.jsonl"
    with data.open("wb") as f:
        for i in range(40):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": "x" * 2000}) + b"\n")
    job = {"input": {"path": str(data)}, "servers": ["http://127.0.0.1:9"], "output": {"dir": str(tmp / "out")},
           "sampling": sampling, **extra}  # fmt: skip
    path = tmp / f"job-{len(list(tmp.glob('job-*')))}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_job_gives_the_requests_the_input_and_the_planner_s_model_and_gpu(tmp_path: Path) -> None:
    monitor = {"planner_model": "llama-3.1-8b", "gpu": "rtx-pro-6000"}
    eos = write_job(tmp_path, {"max_tokens": 1500, "extra_body": {"ignore_eos": True}}, monitor=monitor, samples=2)
    flags = ("--flags", "--max-total-tokens 20000", "--no-what-if")
    data = run("--job", str(eos), *flags)
    w = data["workload"]
    assert (w["prompts"], w["input_len"], w["max_tokens"], w["ignore_eos"]) == (80, 500, 1500, True)
    assert data["plan"]["running"] == running(Workload(80, 500, 1500, max_tokens=1500, ignore_eos=True))
    assert data["model"]["name"].lower().startswith("llama")
    ordinary = run("--job", str(eos), *flags, "--no-ignore-eos", "--output-len", "1000")  # the options win
    assert ordinary["workload"]["ignore_eos"] is False
    assert ordinary["plan"]["running"] == running(Workload(80, 500, 1000, max_tokens=1500))
    assert ordinary["plan"]["running"] > data["plan"]["running"]


def test_job_counts_requests_every_turn_and_sample_with_each_turn_s_history(tmp_path: Path) -> None:
    """40 conversations of 3 user turns (400 characters each: 100 tokens at 4 characters a token), 2 answers each:
    regenerated turn by turn, 240 requests, turn k carrying k earlier answers; with `first`, 80 of one turn."""
    data = tmp_path / "conversations.jsonl"
    with data.open("wb") as f:
        for i in range(40):
            turn = [{"from": "human", "value": "q" * 400}, {"from": "gpt", "value": "a"}]
            f.write(orjson.dumps({"id": i, "conversations": turn * 3}) + b"\n")
    monitor = {"planner_model": "llama-3.1-8b", "gpu": "rtx-pro-6000"}
    flags = ("--output-len", "1000", "--no-what-if")
    found = {}
    for turns in ("all", "first"):
        job = tmp_path / f"{turns}.yaml"
        job.write_text(yaml.safe_dump({
            "input": {"path": str(data), "conversation_turns": turns}, "servers": ["http://127.0.0.1:9"],
            "output": {"dir": str(tmp_path / "out")}, "sampling": {"max_tokens": 2000}, "samples": 2,
            "monitor": monitor,
        }))  # fmt: skip
        found[turns] = run("--job", str(job), *flags)["workload"]
    assert found["first"]["prompts"] == 80 and found["first"]["input_len"] == 100
    assert found["all"]["prompts"] == 240  # today: 80, the rows times the samples
    # turns 1, 2, 3 hold 100, 200, 300 tokens of their own and 0, 1, 2 answers of 1,000 tokens: a mean of 1,200
    assert found["all"]["input_len"] == 1200
    assert (
        "240 requests: 40 rows counted in the dataset x 3.00 user turns answered per row x 2 answers each"
        in (found["all"]["source"])
    )


def write_profile(tmp: Path, **fields: Any) -> Path:
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp / "fleet"), **fields}))
    return path


def test_fleet_gives_the_servers_flags_gpus_and_a_twin_s_gpu(tmp_path: Path) -> None:
    twins = write_profile(
        tmp_path, engine="sim", model="qwen3.6-27b", gpus=4,
        flags={"gpu": "rtx-pro-6000", "time-scale": 0.02, "eta-bw": 0.5, "disable-radix-cache": True,
               "max-running-requests": 40},
    )  # fmt: skip
    data = run("--fleet", str(twins), "--no-what-if")
    p = data["plan"]
    assert (p["max_running"], p["gpus"], p["radix_cache"]) == (40, 4, False)
    assert data["assumptions"]["eta_bw"] == 0.5
    default = run("-m", "qwen3.6-27b", "-g", "rtx-pro-6000", "--no-what-if")["plan"]
    assert default["max_running"] != 40 and default["gpus"] == 1


def test_fleet_of_sglang_servers_plans_their_tensor_parallel_groups(tmp_path: Path) -> None:
    servers = write_profile(
        tmp_path, engine="sglang", model="Qwen/Qwen3.6-27B", gpus=4, tp_size=2, flags={"mem-fraction-static": 0.85}
    )
    data = run("--fleet", str(servers), "--gpu", "h100", "--no-what-if")
    p = data["plan"]
    assert (p["tp_size"], p["replicas"], p["gpus"], p["mem_fraction_static"]) == (2, 2, 4, 0.85)
    assert "does not say which GPU" in fails("--fleet", str(servers))
    vllm = write_profile(tmp_path, engine="vllm", model="x")
    assert "plans SGLang" in fails("--fleet", str(vllm), "-m", "qwen3.6-27b", "-g", "h100")
