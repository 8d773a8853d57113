"""eta fitted continuously from a run's own scrapes: each round's decode sample of a server (a twin's on the GPU's
clock) added, eta fitted again against the planner's capacity of the server, and recorded when it moves."""

from __future__ import annotations

from tokenmill.config import PlannerSpec
from tokenmill.doctor.model import ClientObs, ServerObs
from tokenmill.doctor.predict import PlannerPredictor
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import ServerInfo
from tokenmill.monitor.scrape import ServerSnapshot
from tokenmill.planner import GpuCatalog, server_capacity
from tokenmill.planner.capacity import default_eta
from tokenmill.run.efficiency import MIN_SAMPLES, EtaFit

MODEL, GPU, CTX = "qwen3.6-27b", "rtx-pro-6000", 2000
CLIENT = ClientObs(avg_prompt_tokens=1000.0, avg_output_tokens=2000.0)


def server(running: int, eta: float, scale: float | None = None) -> ServerObs:
    """A server whose decode runs at the planner's roofline with ``eta`` (a twin at ``scale`` runs 1/scale faster)."""
    cap = server_capacity(MODEL, GPU, "", eta=eta)
    tok_s = running / cap.step_time_s(running, running * CTX) / (scale or 1.0)
    snap = ServerSnapshot("sglang", 0.0, True, running=running, gen_throughput=tok_s, sum_seq_lens=running * CTX)
    info = ServerInfo(None, model_path=MODEL, gpu=GPU, time_scale=scale)
    return ServerObs(ServerView("http://t", snap, info, True, None))


def test_the_fit_recovers_the_eta_the_server_decodes_at_and_is_recorded_when_it_moves() -> None:
    fit = EtaFit(PlannerPredictor())
    for i, running in enumerate((4, 6, 8, 10, 12, 14)):
        fit.update((server(running, 0.45, scale=0.02),), CLIENT)
        if i + 1 < MIN_SAMPLES:
            assert fit.estimates == {}  # too few samples to say anything
    est = fit.estimates["http://t"]
    assert abs(est.eta_bw - 0.45) < 0.01 and est.samples == 6
    # what the expectations use (the GDDR7 card's default), beside what the run shows
    assert est.assumed == default_eta(PlannerSpec(), GpuCatalog.load().get(GPU)) == 0.84
    assert [e.url for e in fit.changed()] == ["http://t"]  # recorded once ...
    fit.update((server(15, 0.45, scale=0.02),), CLIENT)
    assert fit.changed() == []  # ... and not again while it holds
    for running in (5, 7, 9, 11, 13, 16, 18, 20, 22, 24):  # the server slows down: eta falls, and is recorded again
        fit.update((server(running, 0.30, scale=0.02),), CLIENT)
    moved = fit.changed()
    assert len(moved) == 1 and moved[0].eta_bw < 0.42


def test_repeats_and_idle_or_unplannable_servers_add_nothing() -> None:
    fit = EtaFit(PlannerPredictor())
    for _ in range(10):
        fit.update((server(8, 0.5),), CLIENT)  # the gauges refresh every few steps: one sample
    idle = ServerObs(ServerView("http://i", ServerSnapshot("sglang", 0.0, True, running=0), None, True, None))
    for running in (2, 4, 6, 8, 10):  # distinct samples, but no model or GPU to plan them with
        unknown = ServerObs(ServerView("http://u", server(running, 0.5).view.snapshot, ServerInfo(None), True, None))
        fit.update((idle, unknown), CLIENT)
    assert fit.estimates == {}
