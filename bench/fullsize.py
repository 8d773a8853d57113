"""``make bench-full``: a seed-sized job run to the end through a SIGKILL and a lost machine, then the post-run
tools timed on it, each with its peak RSS.

The job: 654,676 ShareGPT-style conversation prompts (the generator of ``scripts/make_sample_data.py``, seeded),
two simulated servers whose answers are log-normal with a mean of 2,660 tokens (sigma 0.6), an explicit
``sampling.max_tokens`` of 16,384 (about 0.1 % of the answers reach it) and one generation per row
(``input.conversation_turns: first``, as the seed's run did), with a remote prefix (``output.remote``).

The servers are :mod:`bench.canned` answering at once from 512 prepared answers of log-normal lengths, each
made unique by a request counter: ``tokenmill sim --instant`` renders every answer (about 2.4 ms of its CPU for
2,660 tokens on this 2-core machine), which would make the servers, not tokenmill, take most of the hour.

The prefix is a ``file://`` directory: at this size the prefix holds 7-8 GB of shards, and moto's S3 server
keeps every object in its own memory (and copies some on the way), which a 24 GB machine shared with the run
and its servers cannot hold. ``--s3`` times the prefix tools against moto's S3 server on loopback instead, on
a smaller job (``BENCH_FULL_S3_N``, 50,000 prompts by default) run the same way.

The run, in three starts of ``tokenmill run`` of the package copied aside at the start (so that a source tree
being edited cannot change the job between starts), nothing pinned to a core:

1. killed with SIGKILL at a seeded random point between 15 % and 35 % of the prompts;
2. rerun (it resumes from the output directory), and at a seeded point between 50 % and 60 % the machine is
   lost: the client is killed and the output directory deleted;
3. the same job file rerun: it takes what is done over from the prefix and runs to the end.

Each start's peak RSS is the kernel's high-water mark of the client (``wait4``); its RSS is also sampled every
second. Then each tool runs in a fresh process, timed, with its peak RSS: ``verify``, ``inspect``, ``export
--format specforge`` (every format of :data:`EXPORT_FORMATS`), ``report`` and ``status``, each of ``OUT`` and of
the prefix alone. Every export's lines are counted against the job's completions (the lines of the prefix's
shards): an export that wrote fewer fails its row, plainly. Then ``export --format tokens`` of ``OUT`` through a
Qwen3.6-sized (248K) tokenizer built here (:mod:`bench.vocab`), on every core (``--workers`` at its default): a
row of the same table, its rows/s, its rows counted the same way, the peak RSS of its largest process (the main
one or a worker) against the tools' limit, and the memory of all its processes sampled each second (their
proportional set sizes: the tokenizer the forked workers share counted once) (``BENCH_FULL_TOKENS=0`` skips it:
about an hour on 2 cores).

Prints the tables and the targets, and writes bench/results-fullsize.json.

Environment: ``BENCH_FULL_DIR`` the work directory (default ``$TMPDIR/tokenmill-bench-full``, outside the
checkout: about 2 x 8 GB for the run and the exports); ``BENCH_FULL_N`` the prompts (default 654,676);
``BENCH_QUICK=1`` 20,000 prompts; ``BENCH_FULL_SEED`` the seed of the kill points (default 20). Each size has
its own work directory (``BENCH_FULL_DIR/N``); a run of another size than the seed's writes its JSON there.

    python -m bench.fullsize                 # generate (once per work directory), run, time the tools
    python -m bench.fullsize --tools-only    # time the tools again on the work directory's finished job
    python -m bench.fullsize --s3            # the prefix tools against loopback S3 (moto), a smaller job
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from bench.common import CPUS, HERE, ROOT, Sim, rss_mb

SEED_PROMPTS = 654_676
QUICK_PROMPTS = 20_000
OUTPUT_MEAN, OUTPUT_SIGMA = 2660, 0.6
MAX_TOKENS = 16_384
SERVERS = 2
CONCURRENCY = 128  # per server (the canned servers export no SGLang metrics for concurrency: auto to follow)
KILL_AT = (0.15, 0.35)  # the SIGKILL, as a share of the prompts
LOST_AT = (0.50, 0.60)  # the machine loss
# Export formats timed of OUT and of the prefix (the token export, an hour's work, of OUT alone: time_token_export).
EXPORT_FORMATS: tuple[str, ...] = ("specforge",)
RSS_LIMIT_MB = 500.0
TOOL_LIMIT_S = 60.0
EXPORT_RATIO = 2.0
RESULTS = HERE / "results-fullsize.json"
# Nothing pinned: the point is the size of the corpus, and the servers' answers cost more CPU than the client.
ALL_CORES = set(CPUS)

console = Console(width=None if sys.stdout.isatty() else 160)


def _sample_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample_data", ROOT / "scripts" / "make_sample_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_prompts(path: Path, n: int, seed: int = 0) -> None:
    """``n`` ShareGPT rows (ids ``sg-0000000``...), the same for the same ``n`` and ``seed``."""
    sample = _sample_module()
    rng = random.Random(sample.SEED + seed)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        for i in range(n):
            row = {"id": f"sg-{i:07d}", "conversations": sample.conversation(rng)}
            fh.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    tmp.rename(path)


def job_spec(work: Path, urls: Sequence[str], remote: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "input": {"path": str(work / "prompts.jsonl"), "id_field": "id", "conversation_turns": "first"},
        "servers": list(urls),
        "model": "tokenmill-sim",
        "sampling": {"max_tokens": MAX_TOKENS},
        "concurrency": CONCURRENCY,
        "output": {"dir": str(work / "out"), "remote": remote, "storage_options": options or {}},
        "status_interval_s": 3600,
    }


@contextmanager
def servers() -> Iterator[list[str]]:
    """The simulated servers: :mod:`bench.canned` with log-normal answer lengths, every answer unique."""
    args = ["--mean", str(OUTPUT_MEAN), "--sigma", str(OUTPUT_SIGMA), "--max-tokens", str(MAX_TOKENS)]
    started: list[Sim] = []
    try:
        for i in range(SERVERS):
            started.append(Sim([*args, "--seed", str(i)], ALL_CORES, canned=True))
        yield [s.url for s in started]
    finally:
        for s in started:
            s.stop()


# ---- processes -----------------------------------------------------------------------------------------


@dataclass
class Measured:
    """One child process: its wall time, exit code and peak RSS (the kernel's high-water mark)."""

    name: str
    argv: list[str]
    wall_s: float
    rc: int
    peak_rss_mb: float
    sampled_peak_mb: float = 0.0
    sampled_peak_at_s: float = 0.0
    killed: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            preexec_fn=lambda: os.sched_setaffinity(0, ALL_CORES),
        )


def measure(
    name: str,
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    kill_when: Any = None,
    period_s: float = 1.0,
    tree: bool = False,
) -> Measured:
    """Run ``argv`` to its end (or until ``kill_when()`` is true: then SIGKILL), sampling its RSS (with ``tree``:
    the memory of it and every process it started, each page counted once: see :func:`tree_mb`)."""
    proc = _spawn(argv, log, env)
    t0 = time.perf_counter()
    peak, peak_at, killed = 0.0, 0.0, False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # wait4 keeps the child's peak RSS
        if pid:
            break
        try:
            rss = tree_mb(proc.pid) if tree else rss_mb(proc.pid)
        except OSError:
            rss = 0.0
        if rss > peak:
            peak, peak_at = rss, time.perf_counter() - t0
        if not killed and kill_when is not None and kill_when():
            proc.send_signal(signal.SIGKILL)
            killed = True
            continue
        time.sleep(period_s)  # the sampling period of the RSS curve and of the kill check, not a synchronization
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        name,
        list(argv),
        time.perf_counter() - t0,
        proc.returncode,
        usage.ru_maxrss / 1024,
        peak,
        peak_at,
        killed,
    )


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree_mb(pid: int) -> float:
    """The memory of ``pid`` and its descendants, MB: the sum of their proportional set sizes (a page that forked
    workers share is counted once, split between them; their RSS would count it once a process)."""
    total = 0.0
    for p in _descendants(pid):
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
                    break
        except OSError:  # it ended between the listing and the read
            continue
    return total


def tokenmill(*args: str) -> list[str]:
    return [sys.executable, "-m", "tokenmill", *args]


# ---- the run -------------------------------------------------------------------------------------------


def sealed(out: Path) -> int:
    """Completions in the output directory's manifest (sealed shards), without parsing it."""
    try:
        with (out / "manifest.jsonl").open("rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return 0
    total = 0
    for line in data.splitlines():
        at = line.find(b'"count":')
        if at >= 0:
            total += int(line[at + 8 :].split(b",", 1)[0])
    return total


def prefix_dir(work: Path) -> Path:
    return work / "prefix"


def run_job(work: Path, n: int, seed: int) -> dict[str, Any]:
    """Generate the prompts (once), run the job through a SIGKILL and a machine loss, return what was measured."""
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.jsonl"
    t0 = time.perf_counter()
    if not prompts.exists():
        write_prompts(prompts, n)
    input_s = time.perf_counter() - t0
    out, prefix = work / "out", prefix_dir(work)
    for stale in (out, prefix):
        shutil.rmtree(stale, ignore_errors=True)
    # The three starts and the servers run the package as it is now, copied aside: a source tree edited during
    # the run (e.g. a new job field) would otherwise make the later starts another job.
    snapshot = work / "snapshot"
    shutil.rmtree(snapshot, ignore_errors=True)
    shutil.copytree(ROOT / "src" / "tokenmill", snapshot / "tokenmill", ignore=shutil.ignore_patterns("__pycache__"))
    code = _code()
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(snapshot)
    rng = random.Random(seed)
    kill_at, lost_at = round(rng.uniform(*KILL_AT) * n), round(rng.uniform(*LOST_AT) * n)
    try:
        starts = _three_starts(work, n, kill_at, lost_at)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return {
        "prompts": n,
        "seed": seed,
        "code": code,
        "kill_at": kill_at,
        "lost_at": lost_at,
        "input_write_s": input_s,
        "starts": [asdict(s) for s in starts],
        "generation_s": sum(s.wall_s for s in starts),
        "corpus": corpus(work),
    }


def _code() -> str:
    """The commit the run's code is from, and whether the tree had changes beside it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True, check=False)
    return head.stdout.strip() + (" + uncommitted changes in src/" if dirty.stdout.strip() else "")


def _three_starts(work: Path, n: int, kill_at: int, lost_at: int) -> list[Measured]:
    out, prefix = work / "out", prefix_dir(work)
    starts: list[Measured] = []
    log = work / "run.log"
    log.write_text("")
    with servers() as urls:
        job = job_spec(work, urls, prefix.as_uri() + "/")
        path = work / "job.yaml"
        path.write_text(yaml.safe_dump(job, sort_keys=False))
        argv = tokenmill("run", str(path), "--no-live", "--log-level", "WARNING")
        first = measure("start 1 (SIGKILL)", argv, log, kill_when=lambda: sealed(out) >= kill_at)
        first.extra = {"sealed_at_kill": sealed(out)}
        starts.append(first)
        second = measure("start 2 (resume; machine lost)", argv, log, kill_when=lambda: sealed(out) >= lost_at)
        second.extra = {"sealed_at_kill": sealed(out)}
        shutil.rmtree(out)  # the machine is lost with its disk
        starts.append(second)
        third = measure("start 3 (take-over, to the end)", argv, log)
        starts.append(third)
    for s in starts:
        if not s.killed and s.rc != 0:
            raise RuntimeError(f"{s.name} exited {s.rc}: see {log}")
    third.extra = {"taken_over": _taken_over(log)}
    return starts


def _taken_over(log: Path) -> str:
    for line in log.read_text(errors="replace").splitlines():
        if "took over from" in line:
            return line.split("took over from", 1)[1].split("/: ", 1)[-1].strip()
    return ""


def corpus(work: Path) -> dict[str, Any]:
    """The job as its prefix holds it: completions (the lines of its shard objects), bytes, failures."""
    prefix = prefix_dir(work)
    lines = size = 0
    shards = sorted(p for p in prefix.rglob("completions_*.jsonl") if "_tokenmill" not in p.parts)
    for p in shards:
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                lines += chunk.count(b"\n")
                size += len(chunk)
    return {
        "shards": len(shards),
        "completions": lines,
        "bytes": size,
        "success": (prefix / "_SUCCESS").exists(),
        "local_shards": len(list((work / "out").glob("completions_*.jsonl"))),
    }


# ---- the tools -----------------------------------------------------------------------------------------


def _lines(path: Path) -> int:
    total = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 24):
            total += chunk.count(b"\n")
    return total


def time_tools(work: Path, prefix_url: str, completions: int, env: dict[str, str] | None = None) -> list[Measured]:
    """Every post-run tool of OUT and of the prefix alone, each in a fresh process."""
    out = work / "out"
    tools = work / "tools"
    shutil.rmtree(tools, ignore_errors=True)
    tools.mkdir()
    log = tools / "tools.log"
    rows: list[Measured] = []
    for where, target in (("OUT", str(out)), ("PREFIX", prefix_url)):
        tag = where.lower()
        plan: list[tuple[str, list[str], Path | None]] = [
            ("verify", ["verify", target], None),
            ("inspect", ["inspect", target], None),
        ]
        for fmt in EXPORT_FORMATS:
            exported = tools / f"export-{tag}.{fmt}.jsonl"
            plan.append((f"export --format {fmt}", ["export", target, "--format", fmt, "-o", str(exported)], exported))
        plan += [
            ("report", ["report", target, "-o", str(tools / f"report-{tag}.html")], None),
            ("status", ["status", target], None),
        ]
        for name, args, dest in plan:
            with log.open("a") as fh:
                fh.write(f"\n==== {name} {where}: tokenmill {' '.join(args)}\n")
            m = measure(f"{name} {where}", tokenmill(*args), log, env=env, period_s=0.2)
            if m.rc != 0:
                m.note = f"exit {m.rc} (see {log})"
            if dest is not None:
                written = _lines(dest) if dest.exists() else 0
                m.extra = {"written": written, "completions": completions}
                if written != completions:
                    m.note = (m.note + "; " if m.note else "") + (
                        f"wrote {written:,} of {completions:,} completed records"
                    )
            rows.append(m)
            console.print(f"  {m.name}: {m.wall_s:.1f} s, {m.peak_rss_mb:.0f} MB{', ' + m.note if m.note else ''}")
    return rows


def time_token_export(work: Path, completions: int) -> Measured:
    """``export OUT --format tokens`` through a 248K-token vocabulary on every core, in a fresh process: its time,
    its rows/s, the peak RSS of its largest process and the peak memory of it with its workers, and its lines
    counted against the completions."""
    from bench.vocab import build

    tokenizer = build()
    tools = work / "tools"
    tools.mkdir(exist_ok=True)
    dest = tools / "export-out.tokens.jsonl"
    args = ["export", str(work / "out"), "--format", "tokens", "--tokenizer", str(tokenizer), "--to", str(dest)]
    log = tools / "tools.log"
    with log.open("a") as fh:
        fh.write(f"\n==== export --format tokens OUT: tokenmill {' '.join(args)}\n")
    m = measure("export --format tokens OUT", tokenmill(*args), log, period_s=1.0, tree=True)
    counts = json.loads(dest.with_name(dest.name + ".counts.json").read_text()) if m.rc == 0 else {}
    tokens = counts.get("tokens", {})
    rows = int(tokens.get("rows", 0))
    written = _lines(dest) if dest.exists() else 0
    m.extra = {"written": written, "completions": completions, "rows": rows, "rows_per_s": rows / m.wall_s,
               "workers": tokens.get("workers"), "tree_peak_mb": m.sampled_peak_mb,
               "usage": tokens.get("usage", {}).get("verdict")}  # fmt: skip
    if m.rc != 0:
        m.note = f"exit {m.rc} (see {log})"
    elif written != completions:
        m.note = f"wrote {written:,} of {completions:,} completed records"
    console.print(
        f"  {m.name}: {m.wall_s:.1f} s, {rows / m.wall_s:,.1f} rows/s on {tokens.get('workers')} workers, "
        f"peak RSS {m.peak_rss_mb:.0f} MB (largest process), {m.sampled_peak_mb:.0f} MB with its workers"
    )
    return m


def token_targets(m: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not m:
        return []
    w, c = m["extra"]["written"], m["extra"]["completions"]
    rate = m["extra"]["rows_per_s"]
    tree = m["extra"]["tree_peak_mb"]
    workers = m["extra"]["workers"] or 1
    return [
        {"target": f"{m['name']}: rows/s ({workers} workers)", "measured": rate, "goal": "-",
         "met": m["rc"] == 0, "shown": f"{rate:,.1f} rows/s ({m['wall_s'] / 60:,.1f} min)"},
        {"target": f"{m['name']}: every completed record written", "measured": w, "goal": f"{c:,}",
         "met": w == c and m["rc"] == 0, "shown": f"{w:,}"},
        {"target": f"{m['name']}: peak RSS of its largest process (main or worker)", "measured": m["peak_rss_mb"],
         "goal": f"< {RSS_LIMIT_MB:.0f} MB", "met": m["peak_rss_mb"] < RSS_LIMIT_MB,
         "shown": f"{m['peak_rss_mb']:.0f} MB ({tree:.0f} MB all {workers + 1} processes, shared pages once)"},
    ]  # fmt: skip


# ---- the table and the targets -------------------------------------------------------------------------


def _f(x: float | None, nd: int = 0) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def targets(run: dict[str, Any] | None, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: str, met: bool | None, shown: str) -> None:
        rows.append({"target": name, "measured": value, "goal": goal, "met": met, "shown": shown})

    if run is not None:
        peak = max(s["peak_rss_mb"] for s in run["starts"])
        add("run: peak RSS of every start (take-over included)", peak, f"< {RSS_LIMIT_MB:.0f} MB",
            peak < RSS_LIMIT_MB, f"{peak:.0f} MB")  # fmt: skip
        take = run["starts"][-1]["peak_rss_mb"]
        add("run: peak RSS of the take-over start", take, f"< {RSS_LIMIT_MB:.0f} MB", take < RSS_LIMIT_MB,
            f"{take:.0f} MB")  # fmt: skip
    for t in tools:
        ok = t["rc"] == 0 and not t["note"]
        add(f"{t['name']}: time", t["wall_s"], f"< {TOOL_LIMIT_S:.0f} s", ok and t["wall_s"] < TOOL_LIMIT_S,
            f"{t['wall_s']:.1f} s" + ("" if ok else f" ({t['note']})"))  # fmt: skip
        add(f"{t['name']}: peak RSS", t["peak_rss_mb"], f"< {RSS_LIMIT_MB:.0f} MB", t["peak_rss_mb"] < RSS_LIMIT_MB,
            f"{t['peak_rss_mb']:.0f} MB")  # fmt: skip
        if "written" in t["extra"]:
            w, c = t["extra"]["written"], t["extra"]["completions"]
            add(f"{t['name']}: every completed record written", w, f"{c:,}", w == c and t["rc"] == 0, f"{w:,}")
    by = {t["name"]: t for t in tools}
    for fmt in EXPORT_FORMATS:
        local, remote = by.get(f"export --format {fmt} OUT"), by.get(f"export --format {fmt} PREFIX")
        if local and remote:
            ratio = remote["wall_s"] / local["wall_s"]
            ok = remote["rc"] == 0 and local["rc"] == 0 and ratio <= EXPORT_RATIO
            add(f"export --format {fmt}: PREFIX / OUT time", ratio, f"<= {EXPORT_RATIO:.0f}x", ok, f"{ratio:.2f}x")
    return rows


def render(results: dict[str, Any]) -> None:
    run = results.get("run")
    if run is not None:
        c = run["corpus"]
        t = Table(
            title=f"Full-size run: {run['prompts']:,} conversation prompts, answers log-normal mean {OUTPUT_MEAN:,} "
            f"tokens, {SERVERS} canned servers, file:// prefix ({c['completions']:,} completions, "
            f"{c['bytes'] / 1e9:.2f} GB in {c['shards']:,} shards, _SUCCESS {'yes' if c['success'] else 'NO'})"
        )
        for col in ("start", "wall s", "completions at end", "peak RSS MB", "sampled peak MB (at s)", "taken over"):
            t.add_column(col, justify="left" if col in ("start", "taken over") else "right")
        for s in run["starts"]:
            at_end = s["extra"].get("sealed_at_kill")
            t.add_row(s["name"], _f(s["wall_s"], 1), "-" if at_end is None else _f(at_end), _f(s["peak_rss_mb"]),
                      f"{s['sampled_peak_mb']:.0f} ({s['sampled_peak_at_s']:.0f})",
                      s["extra"].get("taken_over", ""))  # fmt: skip
        console.print(t)
        gen = run["generation_s"]
        console.print(
            f"  generation: {gen:,.0f} s over the three starts ({run['prompts'] / gen:,.0f} prompts/s); "
            f"input written in {run['input_write_s']:.0f} s; kill at {run['kill_at']:,}, machine lost at "
            f"{run['lost_at']:,} (seed {run['seed']})"
        )
    for key, title in (("tools", "Post-run tools"), ("tools_s3", "Post-run tools, loopback S3 (moto)")):
        tools = results.get(key)
        if key == "tools" and tools and results.get("token_export"):
            tools = [*tools, results["token_export"]]
        if not tools:
            continue
        t = Table(title=f"{title}: each in a fresh process, OUT and the prefix alone")
        for col in ("tool", "wall s", "peak RSS MB", "exit", "written / completed", "note"):
            t.add_column(col, justify="left" if col in ("tool", "note") else "right")
        for m in tools:
            w = m["extra"]
            shown = f"{w['written']:,} / {w['completions']:,}" if "written" in w else ""
            t.add_row(m["name"], _f(m["wall_s"], 1), _f(m["peak_rss_mb"]), str(m["rc"]), shown, m["note"])
        console.print(t)
    t = Table(title="Targets (full size)")
    for col in ("target", "measured", "goal", "met"):
        t.add_column(col, justify="left" if col == "target" else "right")
    for r in results["targets"]:
        met = "-" if r["met"] is None else ("[green]yes[/green]" if r["met"] else "[red]no[/red]")
        t.add_row(r["target"], r["shown"], r["goal"], met)
    console.print(t)


# ---- loopback S3 ---------------------------------------------------------------------------------------


def s3_tools(work: Path, n: int, seed: int) -> list[Measured]:
    """The same job at ``n`` prompts with its prefix in moto's S3 server on loopback; the tools timed on it."""
    from bench.bench_remote import _MOTO, ENV

    env = {**os.environ, **ENV}
    moto = subprocess.Popen([sys.executable, "-c", _MOTO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert moto.stdout is not None
        endpoint = f"http://127.0.0.1:{int(moto.stdout.readline())}"
        import boto3

        os.environ.update(ENV)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        work.mkdir(parents=True, exist_ok=True)
        prompts = work / "prompts.jsonl"
        if not prompts.exists():
            write_prompts(prompts, n)
        shutil.rmtree(work / "out", ignore_errors=True)
        url = "s3://bench/corpus/run-1/"
        log = work / "run.log"
        with servers() as urls:
            job = job_spec(work, urls, url, {"endpoint_url": endpoint})
            path = work / "job.yaml"
            path.write_text(yaml.safe_dump(job, sort_keys=False))
            m = measure("run", tokenmill("run", str(path), "--no-live", "--log-level", "WARNING"), log, env=env)
            if m.rc != 0:
                raise RuntimeError(f"the S3 run exited {m.rc}: see {log}")
        completions = sum(_lines(p) for p in (work / "out").glob("completions_*.jsonl"))
        # The prefix alone has no job file to name the endpoint: botocore takes it from the environment.
        return time_tools(work, url, completions, {**env, "AWS_ENDPOINT_URL": endpoint})
    finally:
        if moto.stdin is not None:
            moto.stdin.close()
        moto.wait(30)


# ---- main ----------------------------------------------------------------------------------------------


def default_dir() -> Path:
    return Path(os.environ.get("BENCH_FULL_DIR") or Path(tempfile.gettempdir()) / "tokenmill-bench-full")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fullsize", description=__doc__.splitlines()[0])
    parser.add_argument("--tools-only", action="store_true", help="time the tools on the work directory's job")
    parser.add_argument("--s3", action="store_true", help="also time the prefix tools against loopback S3 (moto)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: $BENCH_FULL_DIR)")
    args = parser.parse_args(argv)
    quick = os.environ.get("BENCH_QUICK") == "1"
    n = int(os.environ.get("BENCH_FULL_N", QUICK_PROMPTS if quick else SEED_PROMPTS))
    seed = int(os.environ.get("BENCH_FULL_SEED", 20))
    work = (args.dir or default_dir() / str(n)).resolve()
    if ROOT in work.parents or work == ROOT:
        sys.exit(f"{work} is inside the checkout: give a work directory outside it (BENCH_FULL_DIR)")
    state = work / "run.json"
    console.print(f"tokenmill bench-full: {n:,} prompts in {work}")
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "work_dir": str(work)}
    if args.tools_only:
        if not state.exists():
            sys.exit(f"{state} is missing: run `python -m bench.fullsize` once first")
        results["run"] = json.loads(state.read_text())
        n = results["run"]["prompts"]
    else:
        results["run"] = run_job(work, n, seed)
        state.write_text(json.dumps(results["run"], indent=2) + "\n")
        render({**results, "targets": targets(results["run"], [])})
    completions = results["run"]["corpus"]["completions"]
    tools = time_tools(work, prefix_dir(work).as_uri() + "/", completions)
    results["tools"] = [asdict(m) for m in tools]
    all_tools = list(results["tools"])
    if args.s3:
        s3_n = int(os.environ.get("BENCH_FULL_S3_N", min(n, 50_000)))
        results["tools_s3"] = [asdict(m) for m in s3_tools(work / f"s3-{s3_n}", s3_n, seed)]
        results["s3_prompts"] = s3_n
    if os.environ.get("BENCH_FULL_TOKENS", "1") != "0":
        results["token_export"] = asdict(time_token_export(work, completions))
    results["targets"] = targets(results["run"], all_tools) + token_targets(results.get("token_export"))
    render(results)
    path = RESULTS if n == SEED_PROMPTS else work / "results-fullsize.json"  # a smaller run stays out of bench/
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    console.print(f"written to {path}")
    return 0 if all(r["met"] for r in results["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())
