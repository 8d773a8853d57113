"""The decode rate as a share of what the hardware should give: the planner's expectation for a server's flags, GPU
and workload, and the roofline's ceiling (every efficiency 1), on the status line, in the tick and the summary."""

from __future__ import annotations

from tokenmill.config import PlannerSpec
from tokenmill.doctor.model import ClientObs, ServerObs
from tokenmill.doctor.predict import IDEAL, PlannerPredictor
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import ServerInfo, parse_server_info
from tokenmill.monitor.lines import expected_text, status_line
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.planner import GpuCatalog, Workload, load_model, parse_flags, plan
from tokenmill.run.summary import Summary


def row(url: str, decode: float | None, expected: float | None, ceiling: float | None, gpu: str = "h100") -> ServerRow:
    r = ServerRow(url, 8, 8, 10, 0, client_tok_s=1.0, usable=True, problem=None, healthy=True, decode_tok_s=decode)
    r.expected_tok_s, r.ceiling_tok_s, r.gpu = expected, ceiling, gpu
    return r


def snap(*rows: ServerRow) -> Snapshot:
    return Snapshot(
        elapsed_s=60.0, done=20, total=100, completed=20, failed=0, skipped=0, retries=0, inflight=16, comp_s=1.0,
        client_tok_s=900.0, eta_s=80.0, servers=list(rows), waiting=False, last_failure=None, decode_tok_s=1000.0,
    )  # fmt: skip


def test_the_fleet_share_weighs_each_server_by_its_expected_rate_and_skips_servers_without_one() -> None:
    s = snap(row("a", 600.0, 1000.0, 2000.0), row("b", 300.0, 500.0, 1000.0), row("c", 999.0, None, None))
    assert s.servers[0].expected_share == 0.6 and s.servers[2].expected_share is None
    assert s.expected_shares() == (900.0 / 1500.0, 900.0 / 3000.0)
    assert expected_text(s) == "60% of expected (h100), 30% of the roofline"
    assert "| 60% of expected (h100), 30% of the roofline" in status_line(s)
    assert expected_text(snap(row("c", 999.0, None, None))) == ""  # no picture, no claim
    assert "of expected" not in status_line(snap(row("c", 999.0, None, None)))


def test_another_gpu_s_rate_for_the_same_workload_gives_the_run_s_share_of_it() -> None:
    a, b = row("a", 600.0, 1000.0, 2000.0), row("b", 300.0, 500.0, 1000.0)
    a.compare_tok_s, a.compare_gpu = 2400.0, "b200"
    b.compare_tok_s, b.compare_gpu = 1200.0, "b200"
    text = expected_text(snap(a, b))
    assert text.endswith(", 25% of b200 (the same workload planned on it)"), text
    back = Snapshot.from_event(snap(a, b).to_event())
    assert back.servers[0].compare_tok_s == 2400.0 and back.servers[0].compare_gpu == "b200"


def test_the_share_survives_the_event_log_and_reaches_the_summary() -> None:
    s = snap(row("a", 600.0, 1000.0, 2000.0, gpu="rtx-pro-6000"))
    s.servers[0].decoded_tokens = 36_000.0  # 600 tok/s over the run's 60 s
    back = Snapshot.from_event(s.to_event())
    assert back.servers[0].expected_tok_s == 1000.0 and back.servers[0].gpu == "rtx-pro-6000"
    summary = Summary.from_snapshot(back, output_dir="out", model="m", api="chat", recorded=(20, 0), state="running")
    line = "| decode rate vs the hardware | 60% of expected (rtx-pro-6000) over the run, 30% of the roofline |"
    assert line in summary.markdown()


def test_a_twin_s_time_scale_is_read_from_its_server_info() -> None:
    info = parse_server_info({"tokenmill_sim": {"gpu": "h200", "time_scale": 0.02}, "model_path": "m"})
    assert info.gpu == "h200" and info.time_scale == 0.02
    assert parse_server_info({"model_path": "m"}).time_scale is None  # a real server runs on the GPU's clock


def test_the_predictor_expects_the_planner_s_rate_and_the_ideal_roofline_above_it() -> None:
    info = ServerInfo(None, model_path="qwen3.6-27b", gpu="rtx-pro-6000")
    obs = ServerObs(ServerView("http://t", None, info, True, None))
    client = ClientObs(avg_prompt_tokens=1000.0, avg_output_tokens=2000.0)
    exp = PlannerPredictor().expected(obs, client)
    assert exp is not None and exp.gpu == "rtx-pro-6000"
    model, gpu = load_model("qwen3.6-27b"), GpuCatalog.load().get("rtx-pro-6000")
    workload = Workload(prompts=1_000_000, input_len=1000, output_len=2000)
    planned = plan(model, gpu, parse_flags(""), workload, PlannerSpec())
    ideal = plan(model, gpu, parse_flags(""), workload, PlannerSpec().model_copy(update=IDEAL))
    assert exp.tok_s == planned.output_tok_s and exp.ceiling_tok_s == ideal.output_tok_s
    # eta 0.84 (0.7 for HBM x 1.2 on this GDDR7 card) and r 0.5 at the default: well below the ceiling
    assert exp.eta_bw == 0.84 and exp.ceiling_tok_s > 1.3 * exp.tok_s
    # the GPU given to the doctor (monitor.gpu / --gpu) wins over the twin's own word
    other = PlannerPredictor(gpu="b200").expected(obs, client)
    assert other is not None and other.gpu == "b200" and other.tok_s > 2 * exp.tok_s
