"""``make bench``: tokenmill's benchmark suite. Prints a table per section, then the targets, and writes
everything to bench/results.json.

Sections (each comparison is measured side by side within one run):

* ``overhead`` — client CPU and completions/s against servers that answer at once with ~2,000-token
  completions, tokenmill vs a plain ``openai.AsyncOpenAI`` + ``asyncio.Semaphore`` script and vs a bare aiohttp +
  orjson loop that writes nothing (the floor; tokenmill's share of its completions/s, median of 3 rounds)
  (bench/overhead.py);
* ``fleet``    — 8 twins of a state-bound hybrid SGLang server: saturation with ``concurrency: auto`` vs a fixed
  64, client-effective vs server decode tok/s, the tail (bench/fleet.py);
* ``resume``   — restart cost of a 1M-prompt job with 900K done: open + resume filter, time and peak RSS
  (bench/bench_resume.py);
* ``remote``   — a fresh machine takes a 1M-prompt job with 900K done over from its remote prefix alone (moto's
  S3 server on loopback): the done set rebuilt from the remote manifest and its index, and with 20 unlisted
  uploads read and hashed (bench/bench_remote.py);
* ``sim``      — what one simulated server costs (bench/bench_sim.py);
* ``memory``   — peak RSS of a 1M-prompt ``tokenmill run`` against instant simulated servers (bench/memory.py;
  a few minutes);
* ``autotune`` — 8 twins of a state-bound 27B hybrid with SGLang's default flags and long outputs: the job with
  and without ``--autotune``, the best static configuration of the planner's what-if, the time to reach 95 % of
  it, and a change that does not pay rolled back (bench/autotune.py; about 6 minutes);
* ``overload`` — the waste of overload: twins of the seed's card sent ``concurrency: 256`` with ~2,700-token
  answers and a read timeout of 36 s and 20 s at time scale 0.02 (1,800 s and 1,000 s of GPU time): tokens the
  servers decoded (their own counters), delivered, wasted (bench/overload.py; a few minutes);
* ``tokens``   — ``export --format tokens`` with a Qwen3.6-sized (248K) vocabulary: rows/s with one worker, with one
  a core, and the tokenizer's own encode rate on the same texts (bench/token_export.py);
* ``quality``  — what the quality signals cost: microseconds per 8 KB answer (prose, code, a loop, the canned
  answer) and tokenmill's client CPU per completion with the signals and with them replaced by a constant
  (bench/quality.py).

Not a section (too long for ``make bench``): ``make bench-full`` (bench/fullsize.py) runs a seed-sized job —
654,676 conversation prompts, answers of ~2,660 tokens, a remote prefix — through a SIGKILL and a lost machine,
with the peak RSS of every start, then times ``verify``, ``inspect``, ``export``, ``report`` and ``status`` of
``OUT`` and of the prefix alone, and ``export --format tokens`` of ``OUT`` on every core through a 248K-token
vocabulary; bench/results-fullsize.json. ``python -m bench.fullsize --tools-only`` times
the tools again on its work directory.

Environment: ``BENCH_SKIP=memory,sim`` skips sections, ``BENCH_ONLY=fleet`` runs only those,
``BENCH_QUICK=1`` uses smaller sizes everywhere (a smoke run), ``BENCH_MEMORY_N`` sets the memory run's size.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import CLIENT_CORES, HERE, SERVER_CORES

console = Console(width=None if sys.stdout.isatty() else 150)
SECTIONS = ("overhead", "fleet", "resume", "remote", "sim", "memory", "autotune", "overload", "quality", "tokens")


def _f(x: float | None, nd: int = 0) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


# ---- sections ------------------------------------------------------------------------------------------


def overhead(quick: bool) -> dict[str, Any]:
    from bench import overhead as mod

    res = mod.run(quick)
    t = Table(title="Client overhead: servers answering at once with ~2,000-token completions")
    for col in (
        "server",
        "client",
        "in flight",
        "compl/s",
        "client CPU s / 1,000 compl",
        "compl/s on one core",
        "median of runs",
        "vs bare loop",
        "vs openai",
    ):
        t.add_column(col, justify="left" if col in ("server", "client") else "right")
    clients = (
        ("tokenmill", "tokenmill", "tokenmill_median_per_s"),
        ("bare", "bare aiohttp+orjson", "bare_median_per_s"),
        ("bare_default_gc", "  default GC", "bare_default_gc_median_per_s"),
        ("openai", "openai", None),
    )
    for key, row in res.items():
        server = "tokenmill sim --instant" if key.startswith("sim") else "bench.canned"
        for client, label, median in clients:
            r = row.get(client)
            if r is None:
                continue
            ratio = f"{row['cpu_ratio']:.1f}x less CPU" if client == "tokenmill" and "cpu_ratio" in row else ""
            floor = ""
            if client == "tokenmill" and "bare_ratio" in row:
                low, high = row["bare_ratio_spread"]
                floor = f"{_pct(row['bare_ratio'])} ({100 * low:.0f}-{100 * high:.0f} %)"
            t.add_row(
                server,
                label,
                str(row["inflight"]),
                _f(r["completions_per_s"]),
                _f(r["cpu_per_1000"], 3),
                _f(r["one_core_per_s"]),
                _f(row.get(median)) if median else "",
                floor,
                ratio,
            )
    console.print(t)
    console.print(
        "  vs bare loop: tokenmill's median completions/s on one core over the bare loop's (the same servers, "
        "bodies, in-flight count, event loop and GC settings; it writes nothing), the range of one round's pair"
    )
    sim = res.get("sim_instant_256", {}).get("tokenmill", {})
    if "server_cpu_per_1000" in sim:
        console.print(
            f"  the instant sims spent {sim['server_cpu_per_1000']:.2f} CPU s per 1,000 completions "
            f"(they bound that row's completions/s, not the client)"
        )
    return res


def fleet(quick: bool) -> dict[str, Any]:
    from bench import fleet as mod

    res = mod.run(quick)
    setup = res["setup"]
    t = Table(
        title=f"Fleet saturation: {setup['servers']} twins of {setup['model']} on {setup['gpu']} "
        f"({setup['flags']}), time scale {setup['time_scale']}"
    )
    for col in (
        "concurrency",
        "targets",
        "decode tok/s",
        "saturation",
        "of model max",
        "(decode-only)",
        "slots busy",
        "client / server",
        "tail / mean latency",
        "run s",
    ):
        t.add_column(col, justify="left" if col == "concurrency" else "right")
    names = {"auto": "auto", str(mod.FIXED): f"fixed {mod.FIXED}", str(mod.SATURATED): f"fixed {mod.SATURATED} (max)"}
    for key, name in names.items():
        r = res[key]
        t.add_row(
            name,
            ",".join(map(str, r["targets_seen"])),
            _f(r["decode_tok_s"]),
            _pct(r["saturation"]),
            _pct(r["model_saturation"]),
            _pct(r["model_saturation_decode_only"]),
            _pct(r["slots_busy"]),
            _pct(r["client_over_server"]),
            f"{r['tail_over_mean_latency']:.2f}",
            _f(r["wall_s"], 1),
        )
    console.print(t)
    auto = res["auto"]
    console.print(
        f"  saturation: decode tok/s over the deep-queue run's ({_f(res[str(mod.SATURATED)]['decode_tok_s'])}); "
        f"model max {_f(auto['max_decode_tok_s'])} tok/s with one prefill per request, "
        f"{_f(auto['max_decode_only_tok_s'])} decoding only"
    )
    return res


def resume(quick: bool) -> dict[str, Any]:
    from bench import bench_resume as mod

    n, done = (200_000, 180_000) if quick else (1_000_000, 900_000)
    res: dict[str, Any] = mod.run(
        n, done, repeat=1 if quick else 2, modes=("warm", "filter"), no_manifest=False, verify=False
    )
    t = Table(title=f"Resume: a {n:,}-prompt job with {done:,} done (fresh process each)")
    for col in ("mode", "open s", "resume filter s", "process wall s", "peak RSS MB"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, m in res["modes"].items():
        filt = m["runs"][0].get("filter_s")
        t.add_row(
            mode, _f(m["open_s_median"], 3), _f(filt, 3), _f(m["process_wall_s_max"], 2), _f(m["peak_rss_mb_max"])
        )
    console.print(t)
    return res


def remote(quick: bool) -> dict[str, Any]:
    from bench import bench_remote as mod

    n, done = (200_000, 180_000) if quick else (1_000_000, 900_000)
    res: dict[str, Any] = mod.run(n, done)
    t = Table(title=f"Remote take-over: a {n:,}-prompt job with {done:,} done, from its prefix alone (moto, loopback)")
    for col in ("mode", "shards read", "remote s", "open s", "rebuild s", "done set", "peak RSS MB"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, m in res["modes"].items():
        t.add_row(mode, str(m["unlisted"]), _f(m["remote_s"], 2), _f(m["open_s"], 2), _f(m["rebuild_s"], 2),
                  _f(m["done"]), _f(m["peak_rss_mb"]))  # fmt: skip
    console.print(t)
    return res


def sim(quick: bool) -> dict[str, Any]:
    from bench import bench_sim as mod

    res = mod.run(seconds=1.0 if quick else 2.0)
    t = Table(title="Simulated server (tokenmill sim): what one costs")
    for col in ("load", "requests/s", "server CPU % of a core", "server RSS MB"):
        t.add_column(col, justify="left" if col == "load" else "right")
    for name, r in res.items():
        if isinstance(r, dict):
            t.add_row(name, _f(r["requests_per_s"]), _f(r["server_cpu_pct_of_one_core"], 1), _f(r["server_rss_mb"]))
    console.print(t)
    return res


def memory(quick: bool) -> dict[str, Any]:
    from bench import memory as mod

    n = int(os.environ.get("BENCH_MEMORY_N", 100_000 if quick else 1_000_000))
    res = mod.run(n)
    t = Table(title=f"Memory: tokenmill run over {n:,} prompts against instant simulated servers")
    for col in ("prompts", "completed", "completions/s", "run s", "peak RSS MB"):
        t.add_column(col, justify="right")
    t.add_row(
        _f(res["prompts"]),
        _f(res["completed"]),
        _f(res["completions_per_s"]),
        _f(res["wall_s"], 1),
        _f(res["peak_rss_mb"]),
    )
    console.print(t)
    console.print(f"  RSS on the way (MB): {res['rss_mb_at']}")
    return res


def autotune(quick: bool) -> dict[str, Any]:
    from bench import autotune as mod

    res = mod.run(quick)
    setup, best, tuned = res["setup"], res["best_static"], res["autotune"]
    t = Table(
        title=f"Autotune: {setup['servers']} twins of {setup['model']} on {setup['gpu']} (SGLang's default flags), "
        f"{setup['prompts']:,} prompts of ~{setup['output_len_mean']:,} output tokens, time scale {setup['time_scale']}"
    )
    for col in ("run", "flags", "decode tok/s", "job s", "lost", "twice"):
        t.add_column(col, justify="left" if col in ("run", "flags") else "right")
    without = res["without"]
    t.add_row("without", "(defaults)", _f(without["decode_tok_s"]), _f(without["wall_s"], 1),
              str(without["lost"]), str(without["duplicates"]))  # fmt: skip
    t.add_row("best static (what-if)", best["flags"], _f(best["decode_tok_s"]), "-", str(best["lost"]),
              str(best["duplicates"]))  # fmt: skip
    kept = next((s["change"] for s in tuned["steps"] if s["step"] == "rolled-out"), "-")
    t.add_row("autotune: before", "(defaults)", _f(tuned["decode_tok_s_before"]), "", "", "")
    t.add_row("autotune: after", kept, _f(tuned["decode_tok_s_after"]), _f(tuned["wall_s"], 1),
              str(tuned["lost"]), str(tuned["duplicates"]))  # fmt: skip
    fault = res["fault"]
    back = next((s for s in fault["steps"] if s["step"] == "roll-back"), None)
    shown = (
        "-"
        if back is None
        else f"rolled back: predicted {back['predicted_gain']:+.0%}, measured "
        + (f"{back['measured']['gain']:+.0%}" if back.get("measured") else "?")
    )
    t.add_row(f"slowdown {fault['slowdown']}", shown, "", _f(fault["wall_s"], 1), str(fault["lost"]),
              str(fault["duplicates"]))  # fmt: skip
    console.print(t)
    console.print(
        f"  95 % of the best static configuration ({_f(best['decode_tok_s'])} tok/s) reached after "
        f"{_f(tuned['time_to_95_s'], 1)} s; planner's best row {_f(best['tok_s_per_gpu'])} tok/s per GPU "
        f"(defaults {_f(best['base_tok_s_per_gpu'])}), rates x{1 / setup['time_scale']:.0f} on the twins' clock"
    )
    return res


def overload(quick: bool) -> dict[str, Any]:
    from bench import overload as mod

    res = mod.run(quick)
    setup = res["setup"]
    t = Table(
        title=f"Overload waste: {setup['servers']} twin(s) of {setup['model']} on {setup['gpu']} ({setup['flags']}), "
        f"concurrency {setup['concurrency']}, ~{setup['output_mean']:,}-token answers, time scale {setup['time_scale']}"
    )
    for col in (
        "read timeout",
        "decoded",
        "delivered",
        "wasted",
        "abandoned",
        "failed",
        "down/flapping/aside",
        "run s",
    ):
        t.add_column(col, justify="left" if col == "read timeout" else "right")
    for key in (f"{x:g}" for x in mod.READ_TIMEOUTS_S):
        r = res[key]
        t.add_row(
            f"{r['read_timeout_s']:g} s ({r['read_timeout_gpu_s']:,.0f} s GPU)",
            _f(r["decoded"]),
            _f(r["delivered"]),
            _pct(r["waste_share"]),
            f"{r['abandoned']:,} ({r['outlived']:,} while running)",
            f"{r['failed']:,}",
            "yes" if r["called_down_or_flapping"] or r["set_aside"] else "no",
            _f(r["wall_s"], 1),
        )
    console.print(t)
    console.print(
        f"  wasted: decoded (the servers' realtime_tokens_total{{mode=decode}}) minus delivered, of decoded; goal "
        f"<= {_pct(setup['goal'])}, nothing failed, no server called down, flapping or set aside"
    )
    return res


def quality(quick: bool) -> dict[str, Any]:
    from bench import quality as mod

    res = mod.run(quick)
    t = Table(title="Quality signals: cost per completion record")
    t.add_column("measured", justify="left")
    t.add_column("µs per completion", justify="right")
    for kind, us in res["signals_us"].items():
        t.add_row(f"signals alone, 8 KB answer: {kind}", _f(us, 1))
    on, off = res["with_signals"], res["without_signals"]
    t.add_row("client CPU with the signals (canned servers)", _f(1000 * on["cpu_per_1000"], 0))
    t.add_row("client CPU with a constant instead", _f(1000 * off["cpu_per_1000"], 0))
    console.print(t)
    console.print(
        f"  signals / client CPU: {_pct(res['signals_share_of_client_cpu'])}; A/B difference "
        f"{res['ab_difference']:+.1%} against a run-to-run spread of {_pct(res['ab_noise'])}"
    )
    return res


def tokens(quick: bool) -> dict[str, Any]:
    from bench import token_export as mod

    res = mod.run(quick)
    t = Table(
        title=f"Token export: {res['records']:,} records of ~{res['tokens_per_record']:,.0f} tokens through the chat "
        f"template, a {res['vocabulary']:,}-token vocabulary"
    )
    for col in ("measured", "workers", "rows/s", "wall s", "ratio", "rows / CPU s", "CPU ratio", "load"):
        t.add_column(col, justify="left" if col == "measured" else "right")
    alone, one, many = res["tokenizer"], res["one_worker"], res["n_workers"]
    t.add_row("the tokenizer alone (load + encode)", "1", _f(alone["rows_per_s"], 1), _f(alone["wall_s"], 1), "",
              _f(alone["rows_per_cpu_s"], 1), "", _f(alone["load"], 1))  # fmt: skip
    t.add_row("export --format tokens", "1", _f(one["rows_per_s"], 1), _f(one["wall_s"], 1),
              f"{res['one_over_tokenizer']:.0%} of the tokenizer", _f(one["rows_per_cpu_s"], 1),
              f"{res['one_over_tokenizer_cpu']:.0%}", _f(one["load"], 1))  # fmt: skip
    t.add_row("export --format tokens", str(many["workers"]), _f(many["rows_per_s"], 1), _f(many["wall_s"], 1),
              f"{res['n_over_n_times_one']:.0%} of N x one worker", _f(many["rows_per_cpu_s"], 1),
              f"{res['n_over_one_cpu']:.0%} of one's", _f(many["load"], 1))  # fmt: skip
    console.print(t)
    rounds = res["rounds_rows_per_s"]
    console.print(
        f"  best of {res['rounds']} rounds, rows/s each: tokenizer {rounds['tokenizer']}, one worker {rounds['one']}, "
        f"{many['workers']} workers {rounds['many']}\n"
        f"  one-time loads: the tokenizer alone {alone['load_wall_s']:.1f} s (its encode alone "
        f"{alone['encode_rows_per_s']:,.1f} rows/s), the export's tokenizer and chat template "
        f"{res['templater_load']['wall_s']:.1f} s; without them, per CPU second, one worker does "
        f"{res['one_over_tokenizer_cpu_steady']:.0%} of the encode's rate\n"
        f"  rows of N workers byte-for-byte those of one: {'yes' if res['same_rows'] else 'NO'}"
    )
    return res


# ---- targets -------------------------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, target: str, ok: Callable[[float], bool], fmt: str) -> None:
        rows.append(
            {
                "target": name,
                "measured": value,
                "goal": target,
                "met": None if value is None else ok(value),
                "shown": "-" if value is None else fmt.format(value),
            }
        )

    ov = results.get("overhead")
    if ov:
        for key in ("inflight_256", "inflight_1024"):
            row = ov.get(key)
            if row:
                inflight = row["inflight"]
                add(
                    f"client completions/s on one core ({inflight} in flight)",
                    row["tokenmill"]["one_core_per_s"],
                    ">= 3,000",
                    lambda v: v >= 3000,
                    "{:,.0f}",
                )
                add(
                    f"client completions/s on one core, tokenmill / a bare aiohttp + orjson loop ({inflight})",
                    row.get("bare_ratio"),
                    ">= 70 %",
                    lambda v: v >= 0.70,
                    "{:.0%}",
                )
                add(
                    f"CPU per completion, openai script / tokenmill ({inflight})",
                    row["cpu_ratio"],
                    ">= 10x",
                    lambda v: v >= 10,
                    "{:.1f}x",
                )
    fl = results.get("fleet")
    if fl:
        add("fleet saturation, concurrency auto", fl["auto"]["saturation"], ">= 99 %", lambda v: v >= 0.99, "{:.1%}")
        add(
            "fleet saturation, concurrency auto, of the model max",
            fl["auto"]["model_saturation"],
            ">= 99 %",
            lambda v: v >= 0.99,
            "{:.1%}",
        )
        add("fleet saturation, fixed 64 (for comparison)", fl["64"]["saturation"], "-", lambda v: True, "{:.1%}")
        add(
            "client-effective / server decode tok/s (auto)",
            fl["auto"]["client_over_server"],
            ">= 97 %",
            lambda v: v >= 0.97,
            "{:.1%}",
        )
        add(
            "tail: 99 % -> 100 % done / mean latency (auto)",
            fl["auto"]["tail_over_mean_latency"],
            "small",
            lambda v: v <= 1.0,
            "{:.2f}",
        )
    rs = results.get("resume")
    if rs and "filter" in rs["modes"]:
        m = rs["modes"]["filter"]
        add("resume: restart (process, open + filter) s", m["process_wall_s_max"], "< 3 s", lambda v: v < 3, "{:.2f} s")
        add("resume: peak RSS", m["peak_rss_mb_max"], "< 300 MB", lambda v: v < 300, "{:.0f} MB")
    rm = results.get("remote")
    if rm:
        worst = max(m["rebuild_s"] for m in rm["modes"].values())
        add(f"remote: done set of {rm['prompts']:,} prompts ({rm['done']:,} done) rebuilt from the prefix", worst,
            "< 10 s", lambda v: v < 10, "{:.1f} s")  # fmt: skip
    mem = results.get("memory")
    if mem:
        add(
            f"memory: peak RSS of a {mem['prompts']:,}-prompt run",
            mem["peak_rss_mb"],
            "< 500 MB",
            lambda v: v < 500,
            "{:.0f} MB",
        )
    at = results.get("autotune")
    if at:
        tuned = at["autotune"]
        add("autotune: fleet after tuning / best static configuration", tuned["after_over_best"], ">= 95 %",
            lambda v: v >= 0.95, "{:.1%}")  # fmt: skip
        add("autotune: job time with / without", tuned["job_time_ratio"], "< 100 %", lambda v: v < 1.0, "{:.1%}")
        add("autotune: time to 95 % of the best configuration", tuned["time_to_95_s"], "-", lambda v: True,
            "{:.0f} s")  # fmt: skip
        lost = sum(at[k]["lost"] + at[k]["duplicates"] for k in ("without", "best_static", "autotune", "fault"))
        add("autotune: prompts lost or recorded twice (4 runs)", lost, "0", lambda v: v == 0, "{:.0f}")
        # Decided and its revert begun is what the target asks; a job that ends first cuts the revert short (the
        # fleet it started is stopped with it), which the table says.
        steps = [s["step"] for s in at["fault"]["steps"]]
        rolled = "rolled-back" in steps or "roll-back" in steps
        said = "no" if not rolled else "yes" if "rolled-back" in steps else "yes (the job ended during the revert)"
        add("autotune: a change that does not pay is rolled back", 1.0 if rolled else 0.0, "yes", lambda v: v == 1,
            said)  # fmt: skip
    over = results.get("overload")
    if over:
        for key, row in over.items():
            if key == "setup":
                continue
            add(f"overload: tokens wasted, concurrency 256, read timeout {row['read_timeout_gpu_s']:,.0f} s GPU",
                row["waste_share"], "<= 2 %", lambda v: v <= 0.02, "{:.1%}")  # fmt: skip
            bad = row["failed"] + int(row["set_aside"]) + int(row["called_down_or_flapping"])
            add(f"overload: failed + servers set aside or called down ({key} s)", bad, "0", lambda v: v == 0, "{:.0f}")
    q = results.get("quality")
    if q:
        add("quality: signals' share of the client's CPU per completion", q["signals_share_of_client_cpu"], "< 10 %",
            lambda v: v < 0.10, "{:.1%}")  # fmt: skip
    tk = results.get("tokens")
    if tk:
        add("token export: one worker / the tokenizer alone", tk["one_over_tokenizer"], ">= 80 %",
            lambda v: v >= 0.8, "{:.0%}")  # fmt: skip
        add(f"token export: {tk['n_workers']['workers']} workers / ({tk['n_workers']['workers']} x one worker)",
            tk["n_over_n_times_one"], ">= 80 %", lambda v: v >= 0.8, "{:.0%}")  # fmt: skip
        add("token export: N workers' rows the same bytes as one's", 1.0 if tk["same_rows"] else 0.0, "yes",
            lambda v: v == 1, "yes" if tk["same_rows"] else "no")  # fmt: skip
    t = Table(title="Targets")
    for col in ("target", "measured", "goal", "met"):
        t.add_column(col, justify="left" if col == "target" else "right")
    for r in rows:
        met = "-" if r["met"] is None else ("[green]yes[/green]" if r["met"] else "[red]no[/red]")
        t.add_row(r["target"], r["shown"], r["goal"], met)
    console.print(t)
    return rows


def main() -> None:
    quick = os.environ.get("BENCH_QUICK") == "1"
    only = {s for s in os.environ.get("BENCH_ONLY", "").split(",") if s}
    skip = {s for s in os.environ.get("BENCH_SKIP", "").split(",") if s}
    unknown = (only | skip) - set(SECTIONS)
    if unknown:
        sys.exit(f"unknown section(s) {', '.join(sorted(unknown))}; known: {', '.join(SECTIONS)}")
    chosen = [s for s in SECTIONS if (not only or s in only) and s not in skip]
    console.print(
        f"tokenmill bench: {', '.join(chosen)}{' (quick)' if quick else ''}; client on core(s) "
        f"{sorted(CLIENT_CORES)}, servers on {sorted(SERVER_CORES)}"
    )
    runners: dict[str, Callable[[bool], dict[str, Any]]] = {
        "overhead": overhead,
        "fleet": fleet,
        "resume": resume,
        "remote": remote,
        "sim": sim,
        "memory": memory,
        "autotune": autotune,
        "overload": overload,
        "quality": quality,
        "tokens": tokens,
    }
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name in chosen:
        t0 = time.perf_counter()
        results[name] = runners[name](quick)
        timings[name] = round(time.perf_counter() - t0, 1)
        console.print(f"  ({name}: {timings[name]:.0f} s)\n")
    rows = targets(results)
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "quick": quick,
        "section_seconds": timings,
        "targets": rows,
        "results": results,
    }
    path = HERE / "results.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
