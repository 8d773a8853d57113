"""Shared pieces of the benchmarks: simulated servers as child processes, CPU pinning, /proc readings."""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TICKS = os.sysconf("SC_CLK_TCK")
CPUS = sorted(os.sched_getaffinity(0))
# The client runs on the first core, the simulated servers on the others (the last one on a 2-core box).
CLIENT_CORES = {CPUS[0]}
SERVER_CORES = set(CPUS[1:]) or set(CPUS)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sim:
    """One ``tokenmill sim`` child process (or, with ``canned``, a :mod:`bench.canned` server), pinned to ``cores``."""

    def __init__(self, args: Sequence[str], cores: set[int] | None = None, canned: bool = False) -> None:
        if canned:
            cmd = [sys.executable, "-m", "bench.canned", *args]
        else:
            cmd = [sys.executable, "-m", "tokenmill", "sim", "--port", "0", "--log-level", "warning", *args]
        pin = cores or SERVER_CORES
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=lambda: os.sched_setaffinity(0, pin)
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"tokenmill sim did not start ({' '.join(args)}): {line!r}")
        self.url = line.split()[-1]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def sims(n: int, args: Sequence[str], cores: set[int] | None = None, canned: bool = False) -> Iterator[list[Sim]]:
    """``n`` simulated servers (seeds 0..n-1), stopped on exit."""
    started: list[Sim] = []
    try:
        for i in range(n):
            started.append(Sim(args if canned else [*args, "--seed", str(i)], cores, canned))
        yield started
    finally:
        for s in started:
            s.stop()


def run_child(module: str, args: Sequence[str], cores: set[int] | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run ``python -m module args`` pinned to ``cores``; it prints one JSON object as its last stdout line."""
    pin = cores or CLIENT_CORES
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        preexec_fn=lambda: os.sched_setaffinity(0, pin),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{module} printed no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def sim_job(urls: list[str], prompts: Path, out: Path, **fields: Any) -> dict[str, Any]:
    """A job against simulated servers, its output in ``out``; ``fields`` are set over the defaults."""
    job: dict[str, Any] = {
        "input": {"path": str(prompts), "id_field": "id"},
        "servers": urls,
        "api": "openai-chat",
        "model": "tokenmill-sim",
        "output": {"dir": str(out)},
        "status_interval_s": 3600,
        "monitor": {"scrape_interval_s": 1.0, "event_interval_s": 1.0, "rate_window_s": 5.0},
    }
    return job | fields


def run_job(job: dict[str, Any], path: Path, what: str) -> tuple[float, str]:
    """Write ``job`` to ``path`` and run it with ``tokenmill run`` on the client's core(s); its wall seconds and
    its stderr. A run that fails raises, naming ``what`` and the end of its stderr."""
    path.write_text(yaml.safe_dump(job))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tokenmill", "run", str(path), "--no-live", "--log-level", "WARNING"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: os.sched_setaffinity(0, CLIENT_CORES),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tokenmill run ({what}) failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc.stderr


def write_prompts(path: Path, n: int, words: int = 12) -> Path:
    """``n`` chat-style rows with ids ``p0..``; each prompt about ``words`` words."""
    filler = " ".join(["about"] * max(0, words - 6))
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"Write a long story number {i} {filler}."}) + "\n")
    return path


def client_args(description: str = "") -> argparse.ArgumentParser:
    """The options every benchmark client takes (its servers, prompts, in-flight and work directory)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--servers", nargs="+", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--inflight", type=int, required=True, help="requests in flight in total")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--work", type=Path, required=True)
    return ap


def print_client_result(client: str, done: int, finished: bool, wall: float, cpu: float) -> None:
    """A benchmark client's one line of JSON: what :func:`run_child` reads back."""
    print(
        json.dumps(
            {
                "client": client,
                "completions": done,
                "finished": finished,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


class Stopwatch:
    """Wall time and this process's CPU time since creation."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0
