"""What one simulated server costs: requests/s in instant mode, and CPU when idle and when busy.

Starts ``tokenmill sim`` as a child process (as the demo and the tests do), drives it from this process
with aiohttp, and reads the child's CPU time from /proc. Runs:

* ``idle``: no requests for a few seconds;
* ``instant-generate`` / ``instant-chat``: ``--instant``, a fixed number of clients each sending
  requests back to back (the client shares the machine, so this is a lower bound of the server's rate);
* ``busy``: default timing (20 ms steps), 256 requests kept in flight, ~256-token answers: the load of a
  simulated server in a demo fleet; ``busy-time-scale-0.05`` the same 20 times faster (as the e2e tests run).

Prints the numbers and writes them to bench/results_sim.json.

    .venv/bin/python bench/bench_sim.py
    .venv/bin/python bench/bench_sim.py --seconds 10 --clients 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sim:
    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "tokenmill", "sim", "--port", "0", "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().split()[-1]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def drive(url: str, path: str, body: dict[str, Any], clients: int, seconds: float) -> int:
    """``clients`` loops posting ``body`` back to back for ``seconds``; returns completed requests."""
    done = 0
    stop_at = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as s:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop_at:
                async with s.post(url + path, json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
    return done


def _drive_in_process(url: str, path: str, body: dict[str, Any], clients: int, seconds: float) -> int:
    return asyncio.run(drive(url, path, body, clients, seconds))


def measure(
    sim: Sim, seconds: float, path: str = "", body: Any = None, clients: int = 0, procs: int = 1
) -> dict[str, float]:
    """Server CPU and completed requests over ``seconds`` (idle when no ``path``), from ``procs`` client processes."""
    pid = sim.proc.pid
    c0, t0 = cpu_seconds(pid), time.monotonic()
    if not path:
        time.sleep(seconds)
        completed = 0
    elif procs == 1:
        completed = _drive_in_process(sim.url, path, body, clients, seconds)
    else:
        with ProcessPoolExecutor(procs) as pool:
            jobs = [
                pool.submit(_drive_in_process, sim.url, path, body, clients // procs, seconds) for _ in range(procs)
            ]
            completed = sum(j.result() for j in jobs)
    wall = time.monotonic() - t0
    cpu = cpu_seconds(pid) - c0
    return {
        "seconds": round(wall, 2),
        "requests": completed,
        "requests_per_s": round(completed / wall, 1),
        "server_cpu_pct_of_one_core": round(100 * cpu / wall, 1),
        "server_rss_mb": round(rss_mb(pid), 1),
    }


def run(seconds: float = 5.0, clients: int = 64, client_procs: int = 2) -> dict[str, Any]:
    """Every measurement of the module docstring; returns them by name."""
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    sim = Sim("--instant")
    try:
        results["idle"] = measure(sim, seconds)
        gen = {"text": "Write one line about the sea.", "sampling_params": {"max_new_tokens": 32}}
        results["instant-generate"] = measure(sim, seconds, "/generate", gen, clients, client_procs)
        chat = {"model": "m", "messages": [{"role": "user", "content": "Write one line."}], "max_tokens": 32}
        results["instant-chat"] = measure(sim, seconds, "/v1/chat/completions", chat, clients, client_procs)
    finally:
        sim.stop()

    busy = {"text": "Write a paragraph.", "sampling_params": {"max_new_tokens": 2048}}
    for name, scale in (("busy", "1"), ("busy-time-scale-0.05", "0.05")):
        sim = Sim("--max-running-requests", "256", "--output-len-mean", "256", "--time-scale", scale)
        try:
            results[name] = measure(sim, 2 * seconds, "/generate", busy, 256)
        finally:
            sim.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=64, help="concurrent clients in instant mode")
    ap.add_argument("--client-procs", type=int, default=2, help="client processes in instant mode")
    args = ap.parse_args()
    results = run(args.seconds, args.clients, args.client_procs)
    for name, row in results.items():
        print(f"{name:18} {row}")
    (HERE / "results_sim.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
