"""Client overhead: completions/s and client CPU per completion against servers that answer at once with
~2,000-token completions — tokenmill against the plain ``openai.AsyncOpenAI`` + ``asyncio.Semaphore`` script and
against the floor, a bare aiohttp + orjson loop that writes nothing (:mod:`bench.client_bare`), side by side in one
run, at 256 and 1,024 requests in flight.

tokenmill and the bare loop run interleaved, ``reps`` times each; ``bare_ratio`` is the median of tokenmill's
completions/s on one core over the median of the bare loop's (the goal: at least 0.70), ``bare_ratio_spread`` the
lowest and highest ratio of one round's pair (a shared machine moves both). The bare loop runs with the same
event loop and garbage-collector settings as ``tokenmill run`` (what is left is tokenmill's own work per
completion: records, quality signals, shards, retries, metrics); ``bare_default_gc`` is the same loop with
Python's default collector, for reference.

The clients run in their own processes pinned to the first core; the servers to the other core. The servers
are :mod:`bench.canned` (prepared answers, a few microseconds each): ``tokenmill sim --instant`` spends ~0.6 ms of
its own CPU drawing and rendering a 2,000-token answer, so one core of it serves fewer than 2,000 requests/s and
would hide the client's limit. One extra row runs tokenmill against two ``tokenmill sim --instant`` processes to
show its CPU per completion does not depend on which server answers.

"completions/s on one core" is 1 / (client CPU seconds per completion): what the client could sustain with a
whole core to itself.
"""

from __future__ import annotations

import statistics
import tempfile
from typing import Any

from bench.common import cpu_seconds, run_child, sims

TOKENS = 2000
INFLIGHT = (256, 1024)


def _client(kind: str, urls: list[str], n: int, inflight: int, extra: list[str] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-") as work:
        args = ["--servers", *urls, "--n", str(n), "--inflight", str(inflight), "--work", work, *(extra or [])]
        result = run_child(f"bench.client_{kind}", args)
    result["cpu_per_1000"] = 1000 * result["cpu_s"] / result["completions"]
    result["completions_per_s"] = result["completions"] / result["wall_s"]
    result["one_core_per_s"] = result["completions"] / result["cpu_s"]
    return result


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the least CPU per completion (a shared machine only ever adds to it)."""
    best = min(runs, key=lambda r: r["cpu_per_1000"])
    best["cpu_per_1000_all"] = [round(r["cpu_per_1000"], 3) for r in runs]
    return best


def _median(runs: list[dict[str, Any]]) -> float:
    return float(statistics.median(float(r["one_core_per_s"]) for r in runs))


def _against_bare(urls: list[str], n: int, inflight: int, reps: int) -> dict[str, Any]:
    """tokenmill and the bare loop, interleaved (drift on a shared machine hits both alike)."""
    tms: list[dict[str, Any]] = []
    bares: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    for _ in range(reps):
        tms.append(_client("tokenmill", urls, n, inflight))
        bares.append(_client("bare", urls, n, inflight))
        if inflight == INFLIGHT[0]:
            plain.append(_client("bare", urls, n, inflight, ["--default-gc"]))
    ratios = [t["one_core_per_s"] / b["one_core_per_s"] for t, b in zip(tms, bares, strict=True)]
    out: dict[str, Any] = {
        "tokenmill_per_s_all": [round(r["one_core_per_s"]) for r in tms],
        "bare_per_s_all": [round(r["one_core_per_s"]) for r in bares],
        "tokenmill_median_per_s": _median(tms),
        "bare": _best(bares),
        "bare_median_per_s": _median(bares),
        "bare_ratio": _median(tms) / _median(bares),
        "bare_ratio_spread": [min(ratios), max(ratios)],
        "_tokenmill_runs": tms,
    }
    if plain:
        out["bare_default_gc"] = _best(plain)
        out["bare_default_gc_median_per_s"] = _median(plain)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    n_tm, n_oa, reps = (8_000, 1_000, 1) if quick else (20_000, 2_000, 3)
    rows: dict[str, Any] = {}
    with sims(2, ["--tokens", str(TOKENS)], canned=True) as servers:
        urls = [s.url for s in servers]
        for inflight in INFLIGHT:
            floor = _against_bare(urls, n_tm, inflight, reps)
            tm = _best(floor.pop("_tokenmill_runs"))
            oa = _best([_client("openai", urls, n_oa, inflight) for _ in range(min(reps, 2))])
            rows[f"inflight_{inflight}"] = {
                "inflight": inflight,
                "tokenmill": tm,
                "openai": oa,
                **floor,
                "cpu_ratio": oa["cpu_per_1000"] / tm["cpu_per_1000"],
                "throughput_ratio": tm["completions_per_s"] / oa["completions_per_s"],
            }
    with sims(2, ["--instant", "--output-len-mean", str(TOKENS), "--output-len-sigma", "0"]) as servers:
        c0 = sum(cpu_seconds(s.pid) for s in servers)
        tm = _client("tokenmill", [s.url for s in servers], n_tm // 2, INFLIGHT[0])
        server_cpu = sum(cpu_seconds(s.pid) for s in servers) - c0
        tm["server_cpu_per_1000"] = 1000 * server_cpu / tm["completions"]
        rows["sim_instant_256"] = {"inflight": INFLIGHT[0], "tokenmill": tm}
    return rows
