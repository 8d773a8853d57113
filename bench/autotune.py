"""Autotune: 8 twins of a 27B GDN hybrid (Qwen3.6-27B on RTX PRO 6000) with SGLang's default flags and a
long-output workload, run by ``tokenmill run --fleet`` four ways, each in full:

* **without**: the default flags all along (the job time to beat);
* **best static**: the best configuration ``tokenmill plan``'s what-if finds for the workload among the flags the
  tuner may change (the profile's ``autotune.allow``; the workload's lengths are the ``without`` run's own),
  started with it (its steady decode tok/s is the target);
* **autotune**: the default flags and ``--autotune``: the canary, its measurement, the roll-out;
* **a change that does not pay**: the same with twins whose decode slows down 5x under the radix-off change
  (``flag_slowdown``), unlike the planner's prediction: it must be measured and rolled back.

Per run: the job's wall time, prompts lost or recorded twice (``tokenmill verify`` and the records: 0), and the
fleet's decode tok/s (the servers' own counters) over its steady part. For autotune: the decode tok/s before the
first change and after the roll-out, and the time from the start until the fleet's decode rate (over a
``RATE_WINDOW_S`` window) first reaches 95 % of the best static configuration's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.common import ROOT, write_prompts

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
SERVERS = 8
TIME_SCALE = 0.02
OUTPUT_MEAN, MAX_TOKENS = 2500, 4096  # long outputs: a request decodes for minutes (of GPU time)
RATE_WINDOW_S = 4.0
AUTOTUNE = {  # wall seconds at the twins' time scale (x50: a window of 16 s is 13 GPU minutes)
    "window_s": 16,
    "max_window_s": 48,
    "warmup_s": 4,
    "cooldown_s": 10,
    "min_remaining_s": 0,
    "rollout_batch": 4,  # the kept change goes to the other 7 servers in two steps
    "rollback_drain_s": 5,  # a canary that does not pay: its slow requests are retried elsewhere
}
SLOWDOWN = "disable-radix-cache=5"  # radix off runs ~3x the requests; 5x slower steps: a clear loss


def profile(state_dir: Path, flags: dict[str, Any] | None = None, slowdown: str | None = None) -> dict[str, Any]:
    sim: dict[str, Any] = {
        "gpu": GPU,
        "time-scale": TIME_SCALE,
        "output-len-mean": OUTPUT_MEAN,
        "log-level": "warning",
    }
    if slowdown:
        sim["flag-slowdown"] = slowdown
    return {
        "engine": "sim",
        "model": MODEL,
        "gpus": SERVERS,
        "base_port": 0,
        "state_dir": str(state_dir),
        "drain_notice_s": 0.5,
        "drain_timeout_s": 60,
        "flags": {**sim, **(flags or {})},
        "autotune": AUTOTUNE,
    }


def _run(work: Path, name: str, prompts: Path, prof: dict[str, Any], autotune: bool) -> tuple[Path, float]:
    out = work / f"out-{name}"
    job = {
        "input": {"path": str(prompts), "id_field": "id"},
        "servers": [],
        "api": "openai-chat",
        "model": MODEL,
        "sampling": {"max_tokens": MAX_TOKENS},
        "output": {"dir": str(out)},
        "status_interval_s": 3600,
        "monitor": {"scrape_interval_s": 1.0, "event_interval_s": 1.0, "rate_window_s": RATE_WINDOW_S},
    }
    (work / f"job-{name}.yaml").write_text(yaml.safe_dump(job))
    (work / f"fleet-{name}.yaml").write_text(yaml.safe_dump(prof))
    cmd = [sys.executable, "-m", "tokenmill", "run", str(work / f"job-{name}.yaml"), "--no-live"]
    cmd += ["--fleet", str(work / f"fleet-{name}.yaml"), "--log-level", "WARNING"] + (
        ["--autotune"] if autotune else []
    )
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"tokenmill run ({name}) failed:\n{proc.stderr[-3000:]}")
    return out, wall


def _records(out: Path) -> list[dict[str, Any]]:
    recs = []
    for shard in sorted(out.glob("completions_*.jsonl")):
        recs += [orjson.loads(line) for line in shard.read_bytes().splitlines() if line]
    return recs


def _integrity(out: Path, n: int) -> dict[str, Any]:
    """Prompts lost (neither completed nor failed) and recorded twice, from the records and `tokenmill verify`."""
    recs = _records(out)
    ids = [r["id"] for r in recs]
    failed = out / "failed.jsonl"
    n_failed = len(failed.read_bytes().splitlines()) if failed.exists() else 0
    verify = subprocess.run(
        [sys.executable, "-m", "tokenmill", "verify", str(out)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return {
        "completed": len(set(ids)),
        "failed": n_failed,
        "lost": n - len(set(ids)) - n_failed,
        "duplicates": len(ids) - len(set(ids)),
        "verify_ok": verify.returncode == 0,
    }


def _events(out: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    from tokenmill.monitor.events import EVENTS_FILE, read_events
    from tokenmill.monitor.snapshot import Snapshot

    records = list(read_events(out / EVENTS_FILE))
    t0 = float(records[0]["t"])
    ticks = [Snapshot.from_event(r) for r in records if r["kind"] == "tick"]
    steps = [{**r, "at": float(r["t"]) - t0} for r in records if r["kind"] == "autotune"]
    return ticks, steps


def _rate(ticks: list[Any], start_s: float, end_s: float) -> float | None:
    """The fleet's decode tok/s between two times of the run (the servers' own counters)."""
    inside = [t for t in ticks if start_s <= t.elapsed_s <= end_s]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    tokens = sum(s.decoded_tokens for s in b.servers) - sum(s.decoded_tokens for s in a.servers)
    return tokens / (b.elapsed_s - a.elapsed_s) if b.elapsed_s > a.elapsed_s else None


def _steady(ticks: list[Any], n: int, after_s: float = 0.0) -> float | None:
    """Decode tok/s from ``after_s`` (or 20 % done) to 90 % done."""
    start = max(after_s, next((t.elapsed_s for t in ticks if t.done >= 0.2 * n), 0.0))
    end = next((t.elapsed_s for t in ticks if t.done >= 0.9 * n), ticks[-1].elapsed_s)
    return _rate(ticks, start, end)


def best_static(input_len: float, output_len: float, n: int) -> dict[str, Any]:
    """The best what-if row the tuner could reach: flags all in the default allow-list (the checkpoint's weights
    and SSM dtype, SGLang's memory fraction)."""
    from tokenmill.autotune.actuators import refusal
    from tokenmill.config import AutotuneSpec, PlannerSpec
    from tokenmill.planner import parse_flags
    from tokenmill.planner.catalog import load_model
    from tokenmill.planner.hardware import GpuCatalog
    from tokenmill.planner.plan import Workload
    from tokenmill.planner.whatif import what_if

    model, gpu = load_model(MODEL), GpuCatalog.load().get(GPU)
    workload = Workload(prompts=n, input_len=input_len, output_len=output_len)
    rows = what_if(model, gpu, parse_flags(""), workload, PlannerSpec(), gpu_count=SERVERS)
    allow = AutotuneSpec().allow
    allowed = [r for r in rows if r.result is not None and (r.is_base or refusal(r.command, allow) is None)]
    best, base = allowed[0], next(r for r in rows if r.is_base)
    return {"flags": best.command, "tok_s_per_gpu": best.tok_s_per_gpu, "base_tok_s_per_gpu": base.tok_s_per_gpu}


def _profile_flags(command: str) -> dict[str, Any]:
    from tokenmill.autotune.actuators import parse_change

    return dict(parse_change(command))


def run(quick: bool = False) -> dict[str, Any]:
    n = int(os.environ.get("BENCH_AUTOTUNE_N", 3000 if quick else 6000))
    res: dict[str, Any] = {
        "setup": {
            "servers": SERVERS,
            "model": MODEL,
            "gpu": GPU,
            "time_scale": TIME_SCALE,
            "output_len_mean": OUTPUT_MEAN,
            "max_tokens": MAX_TOKENS,
            "prompts": n,
            "autotune": AUTOTUNE,
        }
    }
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-autotune-") as tmp:
        work = Path(tmp)
        prompts = write_prompts(work / "prompts.jsonl", n)
        out, wall = _run(work, "without", prompts, profile(work / "fleet-without"), autotune=False)
        recs = _records(out)
        input_len = sum(r["prompt_tokens"] for r in recs) / len(recs)
        output_len = sum(r["completion_tokens"] for r in recs) / len(recs)
        ticks, _ = _events(out)
        res["without"] = {"wall_s": wall, "decode_tok_s": _steady(ticks, n), **_integrity(out, n)}
        best = best_static(input_len, output_len, n)
        res["best_static"] = {**best, "input_len": input_len, "output_len": output_len}
        short = max(3000, n // 2)  # enough prompts to keep 8 servers of ~100 running busy for a while
        prompts_short = write_prompts(work / "prompts-short.jsonl", short)
        flags = _profile_flags(best["flags"])
        out, wall = _run(work, "best", prompts_short, profile(work / "fleet-best", flags), autotune=False)
        ticks, _ = _events(out)
        res["best_static"].update(wall_s=wall, decode_tok_s=_steady(ticks, short), **_integrity(out, short))
        target = res["best_static"]["decode_tok_s"]

        out, wall = _run(work, "autotune", prompts, profile(work / "fleet-autotune"), autotune=True)
        ticks, steps = _events(out)
        res["autotune"] = {"wall_s": wall, "steps": _brief(steps), **_integrity(out, n)}
        canary = next((s for s in steps if s["step"] == "canary"), None)
        rolled = next((s for s in steps if s["step"] == "rolled-out"), None)
        res["autotune"]["decode_tok_s_before"] = _rate(ticks, 0.0, canary["at"]) if canary else None
        after = _steady(ticks, n, after_s=rolled["at"] + RATE_WINDOW_S) if rolled else None
        res["autotune"]["decode_tok_s_after"] = after
        reached = next(
            (
                t.elapsed_s
                for t in ticks
                if (_rate(ticks, t.elapsed_s - 2 * RATE_WINDOW_S, t.elapsed_s) or 0) >= 0.95 * target
            ),
            None,
        )
        res["autotune"]["time_to_95_s"] = reached
        res["autotune"]["after_over_best"] = after / target if after and target else None
        res["autotune"]["job_time_ratio"] = wall / res["without"]["wall_s"]

        out, wall = _run(work, "fault", prompts_short, profile(work / "fleet-fault", slowdown=SLOWDOWN), True)
        _, steps = _events(out)
        res["fault"] = {"wall_s": wall, "slowdown": SLOWDOWN, "steps": _brief(steps), **_integrity(out, short)}
    return res


def _brief(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("at", "step", "change", "canary", "predicted_gain", "measured", "outcome", "reason", "text")
    return [{k: s[k] for k in keep if s.get(k) is not None} for s in steps]


if __name__ == "__main__":
    print(orjson.dumps(run(os.environ.get("BENCH_QUICK") == "1"), option=orjson.OPT_INDENT_2).decode())
