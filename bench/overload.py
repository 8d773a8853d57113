"""Overload waste: twins of the seed's card (Qwen3.6-27B on an RTX PRO 6000, ``--mamba-scheduler-strategy
extra_buffer``) at time scale 0.02, driven by ``tokenmill run`` with ``concurrency: 256`` per server (as the README
and examples show) and ~2,700-token answers, with a read timeout of 36 s (1,800 s of GPU time) and of 20 s.

Per run: the tokens the servers decoded, from their own counters (``sglang:realtime_tokens_total{mode="decode"}``,
read from each twin's ``/metrics`` after the run; the twins are fresh, so the counter is the run's), the tokens
delivered (the records' ``completion_tokens``), the waste (decoded minus delivered, as a share of decoded), the
requests abandoned on read timeouts, failures, servers set aside, and whether the doctor called any server down or
flapping. The goal: waste at most 2 % of decoded, nothing failed, no server called down, flapping or set aside.
"""

from __future__ import annotations

import re
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench.common import run_job, sim_job, sims, write_prompts

MODEL, GPU = "qwen3.6-27b", "rtx-pro-6000"
FLAGS = "--mamba-scheduler-strategy extra_buffer"
TIME_SCALE = 0.02
CONCURRENCY = 256
OUTPUT_MEAN, MAX_TOKENS = 2700, 8192
READ_TIMEOUTS_S = (36.0, 20.0)  # 1,800 s and 1,000 s of GPU time
WASTE_GOAL = 0.02
_DECODE = re.compile(r'^sglang:realtime_tokens_total\{[^}]*mode="decode"[^}]*\} (\S+)$', re.M)


def twin_args(output_mean: int) -> list[str]:
    return ["--model", MODEL, "--gpu", GPU, "--flags", FLAGS, "--time-scale", str(TIME_SCALE),
            "--output-len-mean", str(output_mean)]  # fmt: skip


def decoded(url: str) -> float:
    """A server's own decode counter, summed over its ranks."""
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    return sum(float(x) for x in _DECODE.findall(text))


def _run(urls: list[str], prompts: Path, out: Path, read_timeout_s: float, max_tokens: int) -> tuple[float, str]:
    job = sim_job(
        urls,
        prompts,
        out,
        sampling={"max_tokens": max_tokens},
        concurrency=CONCURRENCY,
        retry={"read_timeout_s": read_timeout_s},
    )
    return run_job(job, out.parent / f"job-{read_timeout_s:g}.yaml", f"read timeout {read_timeout_s:g} s")


def _measure(out: Path, urls: list[str], wall: float, stderr: str, n: int) -> dict[str, Any]:
    done = [
        orjson.loads(line) for p in sorted(out.glob("completions_*.jsonl*")) for line in p.read_bytes().splitlines()
    ]
    failed_file = out / "failed.jsonl"
    failed = len(failed_file.read_bytes().splitlines()) if failed_file.exists() else 0
    server = sum(decoded(u) for u in urls)
    delivered = sum(int(r.get("completion_tokens") or 0) for r in done)
    summary = orjson.loads((out / "summary.json").read_bytes())
    verdicts = " ".join(summary.get("verdicts") or [])
    return {
        "prompts": n,
        "completed": len(done),
        "failed": failed,
        "decoded": server,
        "delivered": delivered,
        "wasted": max(0.0, server - delivered),
        "waste_share": max(0.0, server - delivered) / server if server else None,
        "abandoned": summary.get("abandoned", 0),
        "outlived": summary.get("outlived", 0),
        "set_aside": "setting server" in stderr,
        "called_down_or_flapping": "server down" in verdicts or "server flapping" in verdicts,
        "binding": summary.get("binding"),
        "wall_s": round(wall, 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    servers = 1 if quick else 2
    n = 150 if quick else 300 * servers
    output_mean = OUTPUT_MEAN // 10 if quick else OUTPUT_MEAN  # quick: a tenth of the work and of the timeouts
    scale = 0.1 if quick else 1.0
    res: dict[str, Any] = {
        "setup": {"servers": servers, "model": MODEL, "gpu": GPU, "flags": FLAGS, "time_scale": TIME_SCALE,
                  "concurrency": CONCURRENCY, "output_mean": output_mean, "prompts": n, "goal": WASTE_GOAL},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-overload-") as tmp:
        work = Path(tmp)
        prompts = write_prompts(work / "prompts.jsonl", n)
        for timeout in READ_TIMEOUTS_S:
            read_timeout = timeout * scale
            with sims(servers, twin_args(output_mean)) as procs:
                urls = [p.url for p in procs]
                out = work / f"out-{timeout:g}"
                wall, stderr = _run(urls, prompts, out, read_timeout, MAX_TOKENS if not quick else MAX_TOKENS // 8)
                row = _measure(out, urls, wall, stderr, n)
            row["read_timeout_s"] = read_timeout
            row["read_timeout_gpu_s"] = read_timeout / TIME_SCALE
            row["met"] = bool(
                row["waste_share"] is not None
                and row["waste_share"] <= WASTE_GOAL
                and not row["failed"]
                and not row["set_aside"]
                and not row["called_down_or_flapping"]
            )
            res[f"{timeout:g}"] = row
    return res


if __name__ == "__main__":
    print(orjson.dumps(run("--quick" in sys.argv)).decode())
