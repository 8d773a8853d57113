"""``python -m chaos``: run the chaos test, print its summary, exit 0 only when every check passed."""

from __future__ import annotations

import argparse
import dataclasses
import random
import signal
import sys
from pathlib import Path
from types import FrameType

from rich.console import Console

from chaos.config import ChaosConfig
from chaos.harness import run_chaos


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run: a few kills, each fault kind once")
    parser.add_argument("--kills", type=int, help="client SIGKILLs, at least (default: 50, quick: 5)")
    parser.add_argument("--seed", type=int, help="seed of every random choice (default: a random one, printed)")
    parser.add_argument("--prompts", type=int, help="input size (default: 150 per kill, quick: 1000)")
    parser.add_argument("--json", type=Path, help="write the JSON summary here (default: WORKDIR/summary.json)")
    parser.add_argument("--workdir", type=Path, help="work directory (default: a new temporary directory)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    make = ChaosConfig.quick_run if args.quick else ChaosConfig.full_run
    cfg = make(seed) if args.kills is None else make(seed, args.kills)
    cfg = dataclasses.replace(cfg, workdir=args.workdir, json_path=args.json)
    if args.prompts is not None:
        cfg = dataclasses.replace(cfg, prompts=args.prompts)
    console = Console()
    console.print(f"chaos: seed {seed} (rerun with --seed {seed} to make the same choices)")
    signal.signal(signal.SIGTERM, _interrupt)
    report = run_chaos(cfg, log=console.print)
    report.render(console)
    if report.interrupted:
        return 130
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
