"""What the quality signals cost on the hot path: every completion record gets them when it is written.

Two measurements side by side in one run:

* the signals alone, per answer of ~2,000 tokens (8 KB) of prose, code, a loop and the benchmark's canned
  answer, in microseconds (best of several rounds: a shared machine only adds);
* tokenmill's client CPU per completion against the canned servers (bench/overhead.py's setup), with the
  signals and with them replaced by a constant (``bench.client_tokenmill --no-quality``): the difference is
  what they cost in the real loop, next to the run-to-run noise of the same measurement.
"""

from __future__ import annotations

import random
import sysconfig
import time
from pathlib import Path
from typing import Any

from bench.common import sims
from bench.overhead import TOKENS, _best, _client

ANSWER_CHARS = 8000
INFLIGHT = 256


def _answers() -> dict[str, list[str]]:
    from pydoc_data.topics import topics

    prose = "\n\n".join(topics.values())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = "\n".join(p.read_text() for p in sorted(stdlib.glob("*.py"))[:40])
    rng = random.Random(0)
    words = ("lorem", "ipsum", "dolor", "amet", "sit", "elit", "sed", "tempor")

    def cut(text: str, n: int) -> list[str]:
        starts = [rng.randrange(len(text) - ANSWER_CHARS) for _ in range(n)]
        return [text[s : s + ANSWER_CHARS] for s in starts]

    loop = [p[: ANSWER_CHARS // 3] + "Wait, let me check that again. " * 180 for p in cut(prose, 50)]
    canned = [" ".join(rng.choice(words) for _ in range(TOKENS)) for _ in range(50)]
    return {"prose": cut(prose, 50), "code": cut(code, 50), "loop": loop, "canned answer": canned}


def micro(rounds: int) -> dict[str, float]:
    """Microseconds per signals() call on 8 KB answers, per kind (best round)."""
    from tokenmill.quality.signals import signals

    out = {}
    for kind, texts in _answers().items():
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for text in texts:
                signals(text, "stop")
            best = min(best, (time.perf_counter() - t0) / len(texts))
        out[kind] = best * 1e6
    return out


def run(quick: bool = False) -> dict[str, Any]:
    n, reps = (8_000, 1) if quick else (20_000, 3)
    res: dict[str, Any] = {"signals_us": micro(5 if quick else 20)}
    with sims(2, ["--tokens", str(TOKENS)], canned=True) as servers:
        urls = [s.url for s in servers]
        on, off = [], []
        for _ in range(reps):  # interleaved, so drift on a shared machine hits both alike
            on.append(_client("tokenmill", urls, n, INFLIGHT))
            off.append(_client("tokenmill", urls, n, INFLIGHT, ["--no-quality"]))
    with_q, without = _best(on), _best(off)
    res["with_signals"] = with_q
    res["without_signals"] = without
    per_completion_us = 1000 * with_q["cpu_per_1000"]
    res["client_cpu_us_per_completion"] = per_completion_us
    res["signals_share_of_client_cpu"] = res["signals_us"]["canned answer"] / per_completion_us
    res["ab_difference"] = with_q["cpu_per_1000"] / without["cpu_per_1000"] - 1
    spread = [r["cpu_per_1000"] for r in on + off]
    res["ab_noise"] = (max(spread) - min(spread)) / min(spread)
    return res
