"""One tokenmill run in this process (the client side of the overhead benchmark); prints one JSON line.

python -m bench.client_tokenmill --servers http://127.0.0.1:1234 --n 20000 --inflight 256 --work /tmp/x
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from bench.common import Stopwatch, client_args, print_client_result, write_prompts


def main() -> None:
    ap = client_args()
    ap.add_argument("--profile", type=Path, help="write a cProfile of the run here")
    ap.add_argument("--no-quality", action="store_true", help="replace the quality signals by a constant (A/B)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.no_quality:
        from tokenmill.quality import signals as quality
        from tokenmill.run import work

        constant = quality.signals("", "stop")
        vars(work)["signals"] = lambda *_a, **_k: constant  # the name work.py imported, replaced for this run

    from tokenmill.config import JobSpec
    from tokenmill.run.runner import run_job

    try:
        from tokenmill.run.runner import run_sync
    except ImportError:  # an older tokenmill (before/after comparisons): asyncio's loop
        run_sync = asyncio.run

    args.work.mkdir(parents=True, exist_ok=True)
    prompts = write_prompts(args.work / "prompts.jsonl", args.n)
    per_server = max(1, args.inflight // len(args.servers))
    job = JobSpec.model_validate(
        {
            "input": {"path": str(prompts), "id_field": "id"},
            "servers": args.servers,
            "model": "tokenmill-sim",
            "sampling": {"max_tokens": args.max_tokens},
            "concurrency": per_server,
            "output": {"dir": str(args.work / "out")},
            "status_interval_s": 3600,
            "monitor": {"enabled": bool(int(os.environ.get("BENCH_MONITOR", "0")))},
        }
    )
    watch = Stopwatch()
    if args.profile:
        import cProfile
        import time

        prof = cProfile.Profile(time.process_time)  # CPU time: a busy machine's waits are not the client's cost
        prof.enable()
    main = run_job(job, live=False, install_signals=False)
    # what `tokenmill run` does (uvloop when installed); BENCH_LOOP=asyncio measures asyncio's own loop
    result = asyncio.run(main) if os.environ.get("BENCH_LOOP") == "asyncio" else run_sync(main)
    wall, cpu = watch.read()
    if args.profile:
        prof.disable()
        prof.dump_stats(str(args.profile))
    done = result.summary.completed_this_run
    print_client_result("tokenmill", done, result.finished, wall, cpu)


if __name__ == "__main__":
    main()
