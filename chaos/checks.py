"""What must be true after a chaos run, each as a :class:`Check` with the evidence in its detail."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from chaos.client import Start
from chaos.observe import SEALED, Fetch, offloaded, record_files
from chaos.tear import Tear

VERIFY_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Check:
    """One verdict of the run."""

    name: str
    ok: bool
    detail: str


def _verify(name: str, args: list[str], env: dict[str, str], describe: Callable[[dict[str, Any]], str]) -> Check:
    """Run ``tokenmill verify ARGS --json`` and turn its report into a check named ``name``."""
    cmd = [sys.executable, "-m", "tokenmill", "verify", *args, "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S, env=env)
    try:
        report: dict[str, Any] = orjson.loads(res.stdout)
    except ValueError:
        return Check(name, False, f"exit {res.returncode}: {(res.stdout + res.stderr)[-500:]}")
    if res.returncode == 0 and bool(report.get("ok")):
        return Check(name, True, describe(report.get("counts", {})))
    detail = f"exit {res.returncode}, problems {report.get('problem_totals')}: {report.get('problems', [])[:3]}"
    return Check(name, False, detail)


def verify_cli(out: Path, job: Path, env: dict[str, str]) -> Check:
    """``tokenmill verify OUT --input JOB --remote``: the local output and the remote prefix, end to end."""
    return _verify(
        "verify --input --remote",
        [str(out), "--input", str(job), "--remote"],
        env,
        lambda c: (
            f"{c.get('sealed_shards', 0)} sealed shards, {c.get('sealed_records', 0)} completions, "
            f"{c.get('failed', 0)} failed, {c.get('missing', 0)} missing, "
            f"{c.get('unexpected', 0)} unexpected; remote: every shard byte for byte"
        ),
    )


def verify_prefix_cli(job: Path, env: dict[str, str]) -> Check:
    """``tokenmill verify --remote --input JOB``: the whole job from the remote prefix alone."""
    return _verify(
        "verify PREFIX --input",
        ["--remote", "--input", str(job)],
        env,
        lambda c: (
            f"the prefix alone: {c.get('sealed_shards', 0)} shard objects read back, "
            f"{c.get('sealed_records', 0)} completions, {c.get('failed', 0)} failed, "
            f"{c.get('missing', 0)} missing, {c.get('duplicates', 0)} twice"
        ),
    )


def exactly_once(input_ids: list[str], out: Path, fetch: Fetch | None = None) -> Check:
    """Every input id is completed exactly once or failed with a reason, and nothing else is recorded (the shards
    a start took over after a machine loss read from the remote prefix through ``fetch``)."""
    seen: Counter[str] = Counter()
    completed = failed = 0
    no_reason: list[str] = []
    open_left: list[str] = []
    local = {p.name for p in record_files(out)}
    taken = (fetch(name) or b"" for name in sorted(offloaded(out) - local)) if fetch is not None else ()
    for data in taken:
        for line in data.splitlines():
            seen[orjson.loads(line)["id"]] += 1
            completed += 1
    for path in record_files(out):
        if not SEALED.fullmatch(path.name) and path.name != "failed.jsonl":
            open_left.append(path.name)
        for line in path.read_bytes().splitlines():
            rec = orjson.loads(line)
            seen[rec["id"]] += 1
            if path.name == "failed.jsonl":
                failed += 1
                if not rec.get("error_type") or not rec.get("error"):
                    no_reason.append(rec["id"])
            else:
                completed += 1
    expected = Counter(input_ids)
    twice = [i for i, n in seen.items() if n > 1]
    missing = [i for i in expected if i not in seen]
    unexpected = [i for i in seen if i not in expected]
    problems = []
    if twice:
        problems.append(f"{len(twice)} recorded twice (e.g. {twice[:3]})")
    if missing:
        problems.append(f"{len(missing)} never recorded (e.g. {missing[:3]})")
    if unexpected:
        problems.append(f"{len(unexpected)} not in the input (e.g. {unexpected[:3]})")
    if no_reason:
        problems.append(f"{len(no_reason)} failed without a reason (e.g. {no_reason[:3]})")
    if open_left:
        problems.append(f"open shard(s) left after a finished run: {open_left}")
    detail = f"{len(expected)} prompts: {completed} completed once, {failed} failed with a reason"
    return Check("exactly once", not problems, "; ".join(problems) or detail)


def no_torn_shard(out: Path) -> Check:
    """Every sealed shard ends with a whole line, every line is a record, the manifest lists each shard once,
    and no open shard is left."""
    problems: list[str] = []
    shards = [p for p in record_files(out) if SEALED.fullmatch(p.name)]
    for path in shards:
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            problems.append(f"{path.name} ends in a torn line")
        for line in data.splitlines():
            try:
                orjson.loads(line)["id"]
            except (ValueError, KeyError, TypeError):
                problems.append(f"{path.name} holds a line that is not a record")
                break
    left_open = [p.name for p in out.glob("completions_*.jsonl.open")]
    if left_open:
        problems.append(f"open shard(s) left: {left_open}")
    listed = [orjson.loads(line)["shard"] for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    remote_only = offloaded(out)
    if sorted(n for n in listed if n not in remote_only) != sorted(p.name for p in shards):
        problems.append(f"the manifest lists {len(listed)} shards for {len(shards)} sealed ones")
    detail = f"{len(shards)} sealed shards, each whole and listed once in the manifest; no open shard left"
    if remote_only:
        detail += f"; {len(remote_only)} more listed and taken over from the remote after a machine loss"
    return Check("no torn shard", not problems, "; ".join(problems[:5]) or detail)


def crash_loop(starts: list[Start], window_s: float) -> Check:
    """Each start made progress, or was killed too soon to, or stopped by itself saying why."""
    unexplained: list[str] = []
    streak = longest = 0
    for s in starts:
        if s.progress > 0 or s.ended == "exit 0":
            streak = 0
            continue
        streak += 1
        longest = max(longest, streak)
        if s.killed and s.lived_s < window_s:
            continue  # killed before it could have recorded anything
        if not s.killed and s.message:
            continue  # stopped by itself and said why
        how = f"ran {s.lived_s:.1f} s, {s.ended}"
        unexplained.append(f"start {s.index} ({how}) recorded nothing and said nothing (faults: {s.faults})")
    stopped = [s for s in starts if not s.killed and s.ended != "exit 0"]
    detail = (
        f"{len(starts)} starts, {sum(1 for s in starts if s.progress > 0)} made progress, longest run of starts "
        f"without progress {longest}; {len(stopped)} stopped by themselves, each saying why"
    )
    return Check("no crash loop", not unexplained, "; ".join(unexplained[:5]) or detail)


def tracebacks(starts: list[Start], out: Path) -> Check:
    """No client printed a traceback, and the run log holds none."""
    bad = [f"start {s.index} ({s.log})" for s in starts if s.traceback]
    log = out / "tokenmill.log"
    try:
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            bad.append(str(log))
    except OSError:
        pass
    return Check("no traceback", not bad, "; ".join(bad) or f"{len(starts)} client logs and tokenmill.log")


def repairs(tears: list[Tear], starts: list[Start]) -> Check:
    """Every simulated crash tear was repaired by the next start that opened the output, which said so
    (unless it was killed before it could log it)."""
    if not tears:
        return Check("crash damage repaired", True, "no tear was made (no kill was followed by one)")
    problems = [
        f"{t.variant} after start {t.after_start} ({t.done}): never repaired" for t in tears if t.repaired_by is None
    ]
    silent = [
        f"start {t.repaired_by} repaired {t.file} without saying so"
        for t in tears
        if t.repaired_by is not None and not t.announced and not starts[t.repaired_by].killed
    ]
    kinds = ", ".join(sorted({t.variant for t in tears}))
    announced = sum(1 for t in tears if t.announced)
    detail = (
        f"{len(tears)} tears ({kinds}), each repaired by the next start that opened the output; "
        f"{announced} announced as 'output repaired' (the other starts were killed before logging)"
    )
    return Check("crash damage repaired", not problems and not silent, "; ".join((problems + silent)[:5]) or detail)
