"""Resume cost of a big job: how long ``OutputDir.open()`` takes, and how much memory, with most of it done.

Builds (once, with the real writer) an output directory for an N-prompt job with D prompts done: sealed
shards, an open shard cut by a simulated crash, some failures and skips. Then, each in a fresh process:

* ``warm``: open with the files in the page cache (a restart right after a crash);
* ``cold``: open after evicting the manifest and the open shard from the page cache (posix_fadvise);
* ``filter``: open, then stream the N input ids through the done set (what the runner's resume step does);
* ``no-manifest``: open after deleting the manifest (the worst case: every shard is read and re-indexed);
* ``verify``: the full check (every shard read and hashed) against the N input ids.

Prints the numbers and writes them to bench/results_resume.json.

    .venv/bin/python bench/bench_resume.py                      # 1M prompts, 900K done
    .venv/bin/python bench/bench_resume.py --n 100000 --done 90000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Runs in a fresh interpreter; prints one JSON object.
_CHILD = r"""
import json, os, resource, sys, time
t_start = time.perf_counter()
from pathlib import Path
from tokenmill.output import OutputDir, verify

def rss_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

mode, out, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
if mode == "cold":
    for name in os.listdir(out):
        if name.endswith((".open", "manifest.jsonl", "failed.jsonl", "skipped.jsonl")):
            fd = os.open(out / name, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
t_imported = time.perf_counter()
rss_before = rss_mb()
result = {"mode": mode, "import_s": t_imported - t_start, "rss_before_mb": rss_before}
if mode == "verify":
    t0 = time.perf_counter()
    report = verify(out, (str(i) for i in range(n)))
    result.update(seconds=time.perf_counter() - t0, ok=report.ok, totals=report.totals, counts=report.counts)
else:
    t0 = time.perf_counter()
    writer = OutputDir(out)
    state = writer.open()
    result["seconds"] = time.perf_counter() - t0
    result.update(done=len(state.done), completed=state.completed, failed=state.failed, shards=state.shards,
                  open_count=state.open_count, repaired=state.repaired)
    if mode == "filter":
        t1 = time.perf_counter()
        done = state.done
        pending = sum(1 for i in range(n) if str(i) not in done)
        result.update(filter_s=time.perf_counter() - t1, pending=pending)
    writer.close(seal=False)
result["rss_after_mb"] = rss_mb()
result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def build(out: Path, n: int, done: int, chars: int, failed_every: int, shard_size: int) -> dict[str, float]:
    """Write ``done`` of ``n`` prompts with the real writer, then leave the open shard as a crash would."""
    from tokenmill.output import OutputDir
    from tokenmill.records import Completion, Failure, Skip

    text = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    writer = OutputDir(out, shard_size=shard_size)
    writer.open()
    t0 = time.perf_counter()
    completed = failed = 0
    for i in range(done):
        pid = str(i)
        if i % failed_every == failed_every - 1:
            writer.fail(Failure(pid, "q", "PermanentError", "prompt too long", 400, "http://s:1", 1, 0.0))
            failed += 1
        else:
            prompt = [{"role": "user", "content": f"question number {i}"}]
            writer.write(
                Completion(
                    pid,
                    prompt,
                    text,
                    "stop",
                    12,
                    chars // 4,
                    "model",
                    {"temperature": 0.7},
                    "http://s:1",
                    1.5,
                    1,
                    0.0,
                    1.5,
                )
            )
            completed += 1
        if i % 2000 == 0:
            writer.flush()
    for j in range(100):
        writer.skip(Skip(source=f"prompts.jsonl:{n + j}", reason="no messages"))
    writer.flush()
    seconds = time.perf_counter() - t0
    writer.close(seal=False)
    opened = list(out.glob("*.open"))
    if opened:  # a crash in the middle of a line
        with opened[0].open("ab") as fh:
            fh.write(b'{"id":"torn","prompt":[{"role":"us')
    size = sum(p.stat().st_size for p in out.iterdir())
    return {
        "write_s": seconds,
        "records_per_s": done / seconds,
        "completed": completed,
        "failed": failed,
        "dir_bytes": size,
    }


def child(mode: str, out: Path, n: int) -> dict[str, object]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(out), str(n)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{proc.stderr}")
    result: dict[str, object] = json.loads(proc.stdout)
    result["process_wall_s"] = wall
    return result


def run(
    n: int = 1_000_000,
    done: int = 900_000,
    chars: int = 1000,
    failed_every: int = 1200,
    shard_size: int = 500,
    repeat: int = 3,
    modes: tuple[str, ...] = ("warm", "cold", "filter"),
    no_manifest: bool = True,
    verify: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Build the output of an ``n``-prompt job with ``done`` done, open it ``repeat`` times per mode in fresh
    processes, and return the summary (see the module docstring)."""
    work = workdir or Path(tempfile.mkdtemp(prefix="tokenmill-bench-resume-"))
    out = work / "out"
    try:
        print(f"building {done:,} of {n:,} done in {out} ...", flush=True)
        built = build(out, n, done, chars, failed_every, shard_size)
        print(f"  wrote {built['records_per_s']:,.0f} records/s, {built['dir_bytes'] / 1e9:.2f} GB", flush=True)
        snapshot = work / "snapshot"
        shutil.copytree(out, snapshot)
        runs: dict[str, list[dict[str, object]]] = {}
        for mode in modes:
            runs[mode] = []
            for _ in range(repeat):
                shutil.rmtree(out)
                shutil.copytree(snapshot, out)  # every open starts from the crashed state
                runs[mode].append(child(mode, out, n))
        if no_manifest:
            shutil.rmtree(out)
            shutil.copytree(snapshot, out)
            (out / "manifest.jsonl").unlink()
            runs["no-manifest"] = [child("no-manifest", out, n)]
        if verify:
            writer_done = child("warm", out, n)  # repair the torn line so verify checks a clean tree
            runs["verify"] = [child("verify", out, n)]
            runs["verify"][0]["after_open"] = writer_done["done"]
        job = argparse.Namespace(n=n, done=done, chars=chars, shard_size=shard_size)
        return _summarize(job, built, runs)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="prompts in the job")
    parser.add_argument("--done", type=int, default=900_000, help="prompts already recorded")
    parser.add_argument("--chars", type=int, default=1000, help="characters per completion")
    parser.add_argument("--failed-every", type=int, default=1200, help="every k-th done prompt is a failure")
    parser.add_argument("--shard-size", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process opens per mode")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed after)")
    parser.add_argument("--no-verify", action="store_true", help="skip the full verify pass")
    parser.add_argument("--output", type=Path, default=HERE / "results_resume.json")
    args = parser.parse_args()
    summary = run(
        args.n,
        args.done,
        args.chars,
        args.failed_every,
        args.shard_size,
        args.repeat,
        verify=not args.no_verify,
        workdir=args.dir,
    )
    args.output.write_text(json.dumps(summary, indent=2))
    _print(summary)
    print(f"written to {args.output}")


def _summarize(
    args: argparse.Namespace, built: dict[str, float], runs: dict[str, list[dict[str, object]]]
) -> dict[str, Any]:
    modes = {}
    for mode, results in runs.items():
        secs = [float(r["seconds"]) for r in results]  # type: ignore[arg-type]
        modes[mode] = {
            "open_s_median": statistics.median(secs),
            "open_s_max": max(secs),
            "process_wall_s_max": max(float(r["process_wall_s"]) for r in results),  # type: ignore[arg-type]
            "peak_rss_mb_max": max(float(r["peak_rss_mb"]) for r in results),  # type: ignore[arg-type]
            "rss_before_mb": float(results[0]["rss_before_mb"]),  # type: ignore[arg-type]
            "runs": results,
        }
    return {
        "job": {"n": args.n, "done": args.done, "chars": args.chars, "shard_size": args.shard_size},
        "build": built,
        "modes": modes,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }


def _print(summary: dict[str, Any]) -> None:
    print(f"{'mode':<12} {'open s (median)':>16} {'open s (max)':>13} {'process s':>10} {'peak RSS MB':>12}")
    for mode, m in summary["modes"].items():
        print(
            f"{mode:<12} {m['open_s_median']:>16.3f} {m['open_s_max']:>13.3f} {m['process_wall_s_max']:>10.2f} "
            f"{m['peak_rss_mb_max']:>12.0f}"
        )
    filt = summary["modes"]["filter"]["runs"][0]
    print(
        f"resume filter over {summary['job']['n']:,} input ids: {filt['filter_s']:.3f} s, {filt['pending']:,} pending"
    )
    warm = summary["modes"]["warm"]["runs"][0]
    print(
        f"state: {warm['done']:,} done ({warm['completed']:,} completed, {warm['failed']:,} failed), "
        f"{warm['shards']:,} sealed shards, {warm['open_count']} in the open shard; repaired: {warm['repaired']}"
    )


if __name__ == "__main__":
    main()
