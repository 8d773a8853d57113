"""The doctor's planner (stand-alone, in a run, in fleet tune) plans the requests the client sends: their
max_tokens and ignore_eos from its ClientObs, for every prediction, the radix-off cap it proposes included; the
stand-alone doctor takes them from --max-tokens and --ignore-eos."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from tokenmill.cli.doctor import doctor
from tokenmill.config import PlannerSpec
from tokenmill.doctor.model import Candidate, ClientObs, Observation, ServerObs
from tokenmill.doctor.oneshot import Settling
from tokenmill.doctor.predict import PlannerPredictor
from tokenmill.doctor.setting import STEADY_PROMPTS
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import ServerInfo
from tokenmill.planner import GpuCatalog, load_model, parse_flags, plan
from tokenmill.planner.whatif import best_radix_off_running
from tokenmill.planner.workload import request_workload

KV = 20_000
INFO = ServerInfo(None, model_path="llama-3.1-8b", gpu="rtx-pro-6000", max_total_tokens_flag=KV)
VIEW = ServerView("http://t", None, INFO, True, None, decode_tok_s=500.0)
OBS = ServerObs(VIEW)


def client(ignore_eos: bool, max_tokens: int | None = 1500) -> ClientObs:
    return ClientObs(avg_prompt_tokens=500.0, avg_output_tokens=1000.0, max_tokens=max_tokens, ignore_eos=ignore_eos)


def planned(ignore_eos: bool) -> float:
    model, gpu = load_model("llama-3.1-8b"), GpuCatalog.load().get("rtx-pro-6000")
    work = request_workload(STEADY_PROMPTS, 500, 1000, 1500, ignore_eos)
    return plan(model, gpu, parse_flags(f"--max-total-tokens {KV}"), work, PlannerSpec()).output_tok_s


def test_the_doctor_s_predictor_plans_the_client_s_request_kind() -> None:
    eos = PlannerPredictor().expected(OBS, client(True))
    ordinary = PlannerPredictor().expected(OBS, client(False))
    assert eos is not None and ordinary is not None
    assert eos.tok_s == planned(True) < ordinary.tok_s == planned(False)


HYBRID = ServerInfo(None, model_path="qwen3.6-27b", gpu="rtx-pro-6000")
RADIX_OFF = Candidate(
    "--disable-radix-cache --max-running-requests 99",
    ("--disable-radix-cache", "--max-running-requests", "99"),
    fill_memory=True,
)


def radix_off_n(ignore_eos: bool) -> int:
    model, gpu = load_model("qwen3.6-27b"), GpuCatalog.load().get("rtx-pro-6000")
    work = request_workload(STEADY_PROMPTS, 500, 1000, 4000, ignore_eos)
    return best_radix_off_running(model, gpu, parse_flags("--disable-radix-cache"), work, 1, PlannerSpec())


def test_the_radix_off_cap_is_sized_for_the_client_s_request_kind() -> None:
    obs = ServerObs(ServerView("http://t", None, HYBRID, True, None))
    caps = {}
    for eos in (True, False):
        pred = PlannerPredictor()(obs, client(eos, max_tokens=4000), RADIX_OFF)
        assert pred is not None
        found = re.search(r"--max-running-requests (\d+)", pred.change)
        assert found is not None
        caps[eos] = int(found.group(1))
    assert caps == {True: radix_off_n(True), False: radix_off_n(False)}
    assert caps[True] < caps[False]  # ignore_eos answers run to 4,000 tokens: fewer fit


@pytest.mark.parametrize("args", [[], ["--max-tokens", "1500", "--ignore-eos"]])
def test_doctor_plans_the_requests_its_options_name(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    async def observe(*_: Any, **__: Any) -> tuple[Observation, Settling]:
        obs = Observation((OBS,), ClientObs(avg_prompt_tokens=500.0, avg_output_tokens=1000.0, max_tokens=1500))
        return obs, Settling(0.1)

    monkeypatch.setattr("tokenmill.doctor.checkup.observe", observe)
    result = CliRunner().invoke(doctor, ["--servers", "http://t", "--json", *args])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["vs_hardware"][0]
    assert row["expected_tok_s"] == round(planned(bool(args)), 1)


def test_the_doctor_reads_the_kind_of_a_run_s_requests_from_its_job_record(tmp_path: Any) -> None:
    from pathlib import Path

    import orjson

    from tokenmill.config import JobSpec
    from tokenmill.doctor.oneshot import with_run_requests
    from tokenmill.output.identity import JOB_FILE, JobRecord

    out = Path(str(tmp_path))
    assert with_run_requests(out, ClientObs()) == ClientObs()  # no record: as it is
    job = JobSpec.model_validate(
        {
            "input": {"path": str(out / "in.jsonl")},
            "servers": ["http://127.0.0.1:9"],
            "output": {"dir": str(out)},
            "sampling": {"max_tokens": 1500, "extra_body": {"ignore_eos": True}},
        }
    )
    (out / JOB_FILE).write_bytes(orjson.dumps(JobRecord.new(job).to_json()))
    found = with_run_requests(out, ClientObs())
    assert (found.max_tokens, found.ignore_eos) == (1500, True)
    assert with_run_requests(out, ClientObs(max_tokens=900)).max_tokens == 900  # the tick's, when it says

    from tokenmill.autotune.standalone import _client

    _, tuned, _ = _client(out)  # fleet tune --output OUT plans the run's requests too
    assert (tuned.max_tokens, tuned.ignore_eos) == (1500, True)
