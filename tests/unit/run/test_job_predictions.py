"""A run's planner predictions (the doctor's verdicts, the expected rates, autotune's proposals) are planned for
the job's requests: their max_tokens and whether they send ignore_eos (the client's ClientObs says), as SGLang
admits them."""

from __future__ import annotations

from tokenmill.config import PlannerSpec
from tokenmill.doctor.model import Candidate, ClientObs, ServerObs
from tokenmill.doctor.predict import PlannerPredictor
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import ServerInfo
from tokenmill.planner import GpuCatalog, load_model, parse_flags, plan
from tokenmill.planner.plan import Workload

KV = 20_000
INFO = ServerInfo(None, model_path="llama-3.1-8b", gpu="rtx-pro-6000", max_total_tokens_flag=KV)
OBS = ServerObs(ServerView("http://t", None, INFO, True, None))
CLIENT = ClientObs(avg_prompt_tokens=500.0, avg_output_tokens=1500.0, max_tokens=1500)
EOS = ClientObs(avg_prompt_tokens=500.0, avg_output_tokens=1500.0, max_tokens=1500, ignore_eos=True)
MORE_KV = Candidate("--max-total-tokens 40000", ("--max-total-tokens", "40000"))


def planned(kv: int, ignore_eos: bool) -> float:
    model, gpu = load_model("llama-3.1-8b"), GpuCatalog.load().get("rtx-pro-6000")
    work = Workload(1_000_000, 500, 1500, max_tokens=1500, ignore_eos=ignore_eos)
    return plan(model, gpu, parse_flags(f"--max-total-tokens {kv}"), work, PlannerSpec()).tok_s_per_gpu


def test_an_ignore_eos_job_is_expected_to_run_slower_in_a_kv_bound_server() -> None:
    eos = PlannerPredictor().expected(OBS, EOS)
    ordinary = PlannerPredictor().expected(OBS, CLIENT)
    assert eos is not None and ordinary is not None
    assert eos.tok_s == planned(KV, ignore_eos=True) < ordinary.tok_s == planned(KV, ignore_eos=False)


def test_autotune_s_predictions_are_planned_for_the_job_s_request_kind() -> None:
    pred = PlannerPredictor()(OBS, EOS, MORE_KV)
    assert pred is not None and pred.source == "planner"
    assert pred.before.tok_s_per_gpu == planned(KV, ignore_eos=True)
    assert pred.after.tok_s_per_gpu == planned(40_000, ignore_eos=True)
    other = PlannerPredictor()(OBS, CLIENT, MORE_KV)
    assert other is not None
    before, other_before = pred.before.tok_s_per_gpu, other.before.tok_s_per_gpu
    assert before is not None and other_before is not None and other_before > before


def test_the_rate_at_a_fitted_eta_is_the_planner_s_with_that_eta_and_the_client_s_limit() -> None:
    from dataclasses import replace

    from tokenmill.doctor.model import ClientSide

    predictor = PlannerPredictor()
    slow, fast = predictor.rate_at(OBS, EOS, 0.4), predictor.rate_at(OBS, EOS, 0.8)
    assert slow is not None and fast is not None and slow < fast
    fed_two = predictor.rate_at(replace(OBS, client=ClientSide(limit=2)), EOS, 0.8)
    assert fed_two is not None and fed_two < fast  # two in flight run two, whatever the pool holds
    assert predictor.rate_at(OBS, ClientObs(avg_prompt_tokens=500.0), 0.8) is None  # no answer's length yet


def test_a_run_plans_with_its_job_s_request_kind(tmp_path: object) -> None:
    from pathlib import Path

    from tests.helpers.watch import dispatcher
    from tokenmill.config import JobSpec
    from tokenmill.run.watch import RunMonitor

    root = Path(str(tmp_path))
    spec = JobSpec.model_validate(
        {
            "input": {"path": str(root / "in.jsonl")},
            "servers": ["http://127.0.0.1:9"],
            "output": {"dir": str(root / "out")},
            "sampling": {"max_tokens": 1500, "extra_body": {"ignore_eos": True}},
            "monitor": {"enabled": False, "compare_gpu": "h100"},
        }
    )
    mon = RunMonitor(spec, dispatcher(spec), root / "out", "run1")
    client = mon.observation([]).client  # what every prediction of the run is planned with
    assert (client.max_tokens, client.ignore_eos) == (1500, True)
    assert isinstance(mon.predictor, PlannerPredictor) and isinstance(mon.compare, PlannerPredictor)
