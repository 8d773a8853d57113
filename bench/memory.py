"""Memory of a big run: peak RSS of ``tokenmill run`` over a 1M-prompt JSONL against two instant simulated
servers (short answers, so the run takes minutes, not hours), with the job's defaults (``concurrency: auto``,
the monitor on). The client is pinned to the first core, the servers to the other one.

Peak RSS is the kernel's high-water mark of the client process (``wait4``), sampled RSS on the way shows
whether anything grows with the dataset.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import CLIENT_CORES, ROOT, rss_mb, sims, write_prompts

OUTPUT_TOKENS = 64


def run(n: int = 1_000_000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-memory-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        prompts = write_prompts(work / "prompts.jsonl", n)
        write_s = time.perf_counter() - t0
        sim_args = ["--instant", "--output-len-mean", str(OUTPUT_TOKENS), "--output-len-sigma", "0"]
        with sims(2, sim_args) as servers:
            job = {
                "input": {"path": str(prompts), "id_field": "id"},
                "servers": [s.url for s in servers],
                "model": "tokenmill-sim",
                "sampling": {"max_tokens": 4 * OUTPUT_TOKENS},
                "output": {"dir": str(work / "out")},
                "status_interval_s": 3600,
            }
            path = work / "job.yaml"
            path.write_text(yaml.safe_dump(job))
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "tokenmill", "run", str(path), "--no-live", "--log-level", "WARNING"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=ROOT,
                preexec_fn=lambda: os.sched_setaffinity(0, CLIENT_CORES),
            )
            samples: list[tuple[float, float]] = []
            while True:  # wait4 (not Popen.wait) keeps the child's resource usage: its peak RSS
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                samples.append((time.perf_counter() - t0, rss_mb(proc.pid)))
                time.sleep(2.0)  # sampling period of the RSS curve, not a synchronization
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - t0
            err = proc.stderr.read().decode() if proc.stderr else ""
            if proc.returncode != 0:
                raise RuntimeError(f"tokenmill run failed ({proc.returncode}):\n{err[-3000:]}")
        done = sum(1 for p in (work / "out").glob("completions_*.jsonl") for _ in p.open("rb"))
    peak = usage.ru_maxrss / 1024
    return {
        "prompts": n,
        "completed": done,
        "input_write_s": write_s,
        "wall_s": wall,
        "completions_per_s": done / wall,
        "peak_rss_mb": peak,
        "rss_mb_at": {f"{t:.0f}s": round(r, 1) for t, r in samples[:: max(1, len(samples) // 8)]},
    }
