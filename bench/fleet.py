"""Fleet saturation: 8 twins of a state-bound hybrid SGLang server (Qwen3.6-27B, a GDN hybrid, on RTX PRO 6000,
radix cache off and ``--max-running-requests 127``, as the planner recommends), driven by ``tokenmill run`` with
``concurrency: auto``, with a fixed 64 per server, and with a fixed twice the cap per server (a deep queue: every
slot busy all the time, the twin's saturated throughput), each run in full, side by side.

Per run, over its steady state (the ticks of its event log between 20 % and 90 % done):

* **saturation**: the servers' decode tok/s (their own counters) over the twin's maximum, the deep-queue run's
  decode tok/s. Beside it, the maximum from the twin's step model with every slot busy all the time —
  ``slots x L / (L x step(slots, context) + prefill(prompt))`` per server, with ``L`` the run's mean completion
  length and ``context`` the tokens a running request holds on average (prompt + the length-biased mean of
  what it has generated), charging one prefill per request (the twin folds arrivals into one prefill batch
  when they come together, so it does a little better) — and the decode-only bound (no prefill at all).
* **slots busy**: mean running / cap over the servers.
* **client-effective / server decode**: output tokens the client received over tokens the servers decoded
  in the same window (what the client loses: nothing but partial work at the edges).
* **tail**: time from 99 % to 100 % done, over the mean request latency.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.common import run_job, sim_job, sims, write_prompts

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
FLAGS = "--disable-radix-cache --max-running-requests 127"
SERVERS = 8
TIME_SCALE = 0.05
OUTPUT_MEAN, MAX_TOKENS = 1000, 1400  # 127 x (prompt + 1,400) fits the KV pool: no retraction
FIXED = 64
SATURATED = 254  # twice the cap: a queue as deep as the batch


def twin_args() -> list[str]:
    return [
        "--model",
        MODEL,
        "--gpu",
        GPU,
        "--flags",
        FLAGS,
        "--time-scale",
        str(TIME_SCALE),
        "--output-len-mean",
        str(OUTPUT_MEAN),
    ]


def _run(urls: list[str], prompts: Path, out: Path, concurrency: int | str) -> float:
    job = sim_job(urls, prompts, out, sampling={"max_tokens": MAX_TOKENS}, concurrency=concurrency)
    return run_job(job, out.parent / f"job-{concurrency}.yaml", str(concurrency))[0]


def _records(out: Path) -> list[dict[str, Any]]:
    recs = []
    for shard in sorted(out.glob("completions_*.jsonl")):
        recs += [orjson.loads(line) for line in shard.read_bytes().splitlines() if line]
    return recs


def max_decode_tok_s(prompt_tokens: float, lengths: list[int]) -> tuple[float, float]:
    """The twin's maximum decode tok/s per server (wall time): with one prefill per request, and decode only."""
    from tokenmill.config import SimSpec
    from tokenmill.sim.twin import TwinStepModel

    model = TwinStepModel.from_config(SimSpec(model=MODEL, gpu=GPU, engine_flags=FLAGS))
    slots = model.max_running_requests
    mean = sum(lengths) / len(lengths)
    generated = sum(x * x for x in lengths) / (2 * sum(lengths))  # a running request's mean progress
    step = model.step_time_s(slots, round(slots * (prompt_tokens + generated)))
    prefill = model.prefill_batch_time_s([round(prompt_tokens)])
    with_prefill = slots * mean / (mean * step + slots * prefill)
    return with_prefill / TIME_SCALE, slots / step / TIME_SCALE


def _analyse(out: Path, wall: float, n: int) -> dict[str, Any]:
    from tokenmill.monitor.events import EVENTS_FILE, read_events
    from tokenmill.monitor.snapshot import Snapshot

    ticks = [Snapshot.from_event(r) for r in read_events(out / EVENTS_FILE) if r["kind"] == "tick"]
    steady = [t for t in ticks if 0.2 * n <= t.done <= 0.9 * n]
    a, b = steady[0], steady[-1]
    span = b.elapsed_s - a.elapsed_s
    server_tokens = sum(s.decoded_tokens for s in b.servers) - sum(s.decoded_tokens for s in a.servers)
    client_tokens = b.client_tokens - a.client_tokens
    busy = [s.running / s.max_running for t in steady for s in t.servers if s.running and s.max_running]
    limits = sorted({s.limit for t in steady for s in t.servers})
    recs = _records(out)
    lengths = [r["completion_tokens"] for r in recs]
    prompt = sum(r["prompt_tokens"] for r in recs) / len(recs)
    max_tok_s, decode_only = max_decode_tok_s(prompt, lengths)
    decode_tok_s = server_tokens / span
    finished = sorted(r["finished_at"] for r in recs)
    mean_latency = sum(r["latency_s"] for r in recs) / len(recs)
    t99 = finished[math.ceil(0.99 * len(finished)) - 1]
    return {
        "completed": len(recs),
        "wall_s": wall,
        "steady_window_s": span,
        "decode_tok_s": decode_tok_s,
        "client_tok_s": client_tokens / span,
        "max_decode_tok_s": SERVERS * max_tok_s,
        "max_decode_only_tok_s": SERVERS * decode_only,
        "model_saturation": decode_tok_s / (SERVERS * max_tok_s),
        "model_saturation_decode_only": decode_tok_s / (SERVERS * decode_only),
        "slots_busy": sum(busy) / len(busy) if busy else None,
        "client_over_server": client_tokens / server_tokens,
        "mean_output_tokens": sum(lengths) / len(lengths),
        "targets_seen": limits,
        "tail_s": finished[-1] - t99,
        "mean_latency_s": mean_latency,
        "tail_over_mean_latency": (finished[-1] - t99) / mean_latency,
    }


def run(quick: bool = False) -> dict[str, Any]:
    n = 4000 if quick else 6000
    results: dict[str, Any] = {
        "setup": {
            "servers": SERVERS,
            "model": MODEL,
            "gpu": GPU,
            "flags": FLAGS,
            "time_scale": TIME_SCALE,
            "output_len_mean": OUTPUT_MEAN,
            "max_tokens": MAX_TOKENS,
            "prompts": n,
        }
    }
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-fleet-") as tmp:
        work = Path(tmp)
        prompts = write_prompts(work / "prompts.jsonl", n)
        with sims(SERVERS, twin_args()) as servers:
            urls = [s.url for s in servers]
            for concurrency in ("auto", FIXED, SATURATED):
                out = work / f"out-{concurrency}"
                wall = _run(urls, prompts, out, concurrency)
                results[str(concurrency)] = _analyse(out, wall, n)
    reference = results[str(SATURATED)]["decode_tok_s"]
    for key in ("auto", str(FIXED), str(SATURATED)):
        results[key]["saturation"] = results[key]["decode_tok_s"] / reference
    return results
