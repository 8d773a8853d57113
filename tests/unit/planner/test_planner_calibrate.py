"""Calibration: parsing /metrics and scheduler logs, fitting eta, and scraping a loopback server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from tests.helpers import recorded
from tokenmill.cli import cli
from tokenmill.errors import InputError, ServerError
from tokenmill.monitor.samples import scrape_samples
from tokenmill.planner.calibrate import (
    ThroughputSample,
    fit_eta,
    samples_from_log,
    samples_from_metrics,
    usable,
)
from tokenmill.planner.capacity import server_capacity

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
FLAGS = "--mamba-scheduler-strategy no_buffer --disable-radix-cache --max-running-requests 128"


def synthetic(eta: float, points: list[tuple[int, int]]) -> list[ThroughputSample]:
    """What a server whose real efficiency is ``eta`` would report at (running, context tokens)."""
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", FLAGS, eta=eta)
    return [ThroughputSample(b, b / cap.step_time_s(b, k), k) for b, k in points]


def test_real_metrics_and_log_lines_give_samples() -> None:
    """A real 0.5.23 hybrid at its cap of 21: /metrics gives one sample, each decode log line another."""
    (sample,) = samples_from_metrics(recorded.metrics("hybrid"))
    assert sample.running == recorded.recording("hybrid")["running_at_capture"] == 21
    assert sample.gen_tok_s > 0 and sample.context_tokens
    logged = samples_from_log(recorded.log_lines("hybrid"))
    decode_lines = [line for line in recorded.log_lines("hybrid") if "Decode batch" in line]
    assert len(logged) == len(decode_lines) > 0
    assert max(s.running for s in logged) == 21 and all(s.context_tokens for s in logged)


def test_metrics_give_one_sample_per_dp_rank() -> None:
    (one,) = samples_from_metrics(recorded.metrics("hybrid"))
    assert samples_from_metrics(recorded.as_ranks(recorded.metrics("hybrid"), 2)) == [one, one]


def test_metrics_use_tp_rank_zero_and_sequence_lengths() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{tp_rank="0"} 32.0\n'
        'sglang:num_running_reqs{tp_rank="1"} 32.0\n'
        "# TYPE sglang:gen_throughput gauge\n"
        'sglang:gen_throughput{tp_rank="0"} 900.0\n'
        'sglang:gen_throughput{tp_rank="1"} 900.0\n'
        "# TYPE sglang:decode_sum_seq_lens gauge\n"
        'sglang:decode_sum_seq_lens{tp_rank="0"} 51200.0\n'
    )
    assert samples_from_metrics(text) == [ThroughputSample(32, 900.0, 51200)]


def test_garbage_metrics_are_an_input_error() -> None:
    with pytest.raises(InputError):
        samples_from_metrics("sglang:num_running_reqs{ 3\n")


def test_log_lines_hybrid_plain_and_json() -> None:
    lines = [
        "[2026-05-01 10:00:00 TP0] Decode batch, #running-req: 20, #full token: 30720, full token usage: 0.11, "
        "mamba num: 100, mamba usage: 0.98, cuda graph: True, gen throughput (token/s): 349.10, #queue-req: 80",
        "[2026-05-01 10:00:04 TP0] Decode batch, #running-req: 8, #token: 9000, token usage: 0.02, cuda graph: True, "
        "gen throughput (token/s): 150.00, #queue-req: 0",
        "[2026-05-01 10:00:05 TP0] Prefill batch, #new-seq: 3, #new-token: 4000, #running-req: 8",
        '{"running": 4, "gen_throughput": 80.5}',
        '{"num_running_reqs": 2, "gen_tok_s": 41, "decode_sum_seq_lens": 3000}',
        "{not json",
    ]
    assert samples_from_log(lines) == [
        ThroughputSample(20, 349.10, 30720),
        ThroughputSample(8, 150.0, 9000),
        ThroughputSample(4, 80.5, None),
        ThroughputSample(2, 41.0, 3000),
    ]


def test_usable_drops_idle_and_repeated_samples() -> None:
    a, b = ThroughputSample(10, 100.0), ThroughputSample(12, 110.0)
    assert usable([ThroughputSample(0, 0.0), a, a, b, ThroughputSample(3, 0.0), a]) == [a, b, a]


def test_fit_recovers_the_true_eta() -> None:
    samples = synthetic(0.52, [(8, 8 * 1500), (32, 32 * 1500), (64, 64 * 2500), (128, 128 * 1800)])
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", FLAGS)  # planner default eta 0.6
    result = fit_eta(cap, samples, None)
    assert result.eta_bw == pytest.approx(0.52, abs=1e-4)
    assert result.used == 4 and result.skipped == 0
    assert result.rms_log_error < 1e-6
    lo, hi = result.implied_range
    assert lo == pytest.approx(0.52, abs=1e-6) and hi == pytest.approx(0.52, abs=1e-6)


def test_fit_assumes_the_workload_when_lengths_are_missing() -> None:
    measured = synthetic(0.7, [(16, 16 * 2048), (64, 64 * 2048)])
    blind = [ThroughputSample(s.running, s.gen_tok_s) for s in measured]
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", FLAGS)
    assert fit_eta(cap, blind, avg_context=2048).eta_bw == pytest.approx(0.7, abs=1e-4)
    with pytest.raises(InputError, match="no usable decode samples"):
        fit_eta(cap, blind, avg_context=None)


def test_impossible_samples_are_skipped_or_flagged() -> None:
    cap = server_capacity("qwen3.6-27b", "rtx-pro-6000", FLAGS)
    faster_than_fixed = ThroughputSample(10, 1e6, 10_000)  # 10 us a step: below t_fixed
    beyond_roofline = synthetic(1.0, [(32, 32 * 1500)])[0]
    beyond_roofline = ThroughputSample(beyond_roofline.running, beyond_roofline.gen_tok_s * 1.2, 32 * 1500)
    result = fit_eta(cap, [faster_than_fixed, beyond_roofline, *synthetic(0.6, [(64, 64 * 1500)])], None)
    assert result.skipped == 1
    assert any("faster than the roofline" in n for n in result.notes)


def test_calibrate_cli_from_a_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    rows = synthetic(0.55, [(16, 16 * 1800), (96, 96 * 1800), (128, 128 * 1800)])
    log.write_text(
        "\n".join(
            f"Decode batch, #running-req: {s.running}, #full token: {s.context_tokens}, "
            f"gen throughput (token/s): {s.gen_tok_s:.4f}, #queue-req: 0"
            for s in rows
        )
    )
    args = ["calibrate", "-m", "qwen3.6-27b", "-g", "rtx-pro-6000", "--flags", FLAGS, "--metrics-log", str(log)]
    out = CliRunner().invoke(cli, [*args, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["eta_bw"] == pytest.approx(0.55, abs=1e-3) and data["samples_used"] == 3
    text = CliRunner().invoke(cli, args)
    assert "--eta 0.55" in text.output


def test_calibrate_cli_needs_exactly_one_source() -> None:
    out = CliRunner().invoke(cli, ["calibrate", "-m", "qwen3.6-27b", "-g", "h100"])
    assert out.exit_code == 2 and "exactly one of --server" in out.output


async def test_scrape_a_live_server_until_enough_samples() -> None:
    calls = {"n": 0}

    async def metrics(request: web.Request) -> web.Response:
        calls["n"] += 1
        n = calls["n"]
        body = (
            "# TYPE sglang:num_running_reqs gauge\n"
            f'sglang:num_running_reqs{{tp_rank="0"}} {10 + n}\n'
            "# TYPE sglang:gen_throughput gauge\n"
            f'sglang:gen_throughput{{tp_rank="0"}} {100.0 + n}\n'
        )
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        samples = await scrape_samples(f"127.0.0.1:{port}", window_s=30.0, interval_s=0.01, max_samples=3)
    finally:
        await runner.cleanup()
    assert [s.running for s in samples] == [11, 12, 13]
    assert calls["n"] == 3


async def test_scrape_without_metrics_endpoint_says_how_to_enable_it() -> None:
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        with pytest.raises(ServerError, match="--enable-metrics"):
            await scrape_samples(f"http://127.0.0.1:{port}", window_s=1.0, interval_s=0.01, max_samples=1)
    finally:
        await runner.cleanup()
