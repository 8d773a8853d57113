"""The chaos run, start to end: set up (:mod:`chaos.setup`); kill the client again and again while the fault
tracks run; lose the machine (the client and its whole output directory) several times, each next start taking
the records over from the remote prefix; let a last client finish (killed once the moment everything is
recorded); check; tear down.

Every process and thread it starts is stopped on the way out, also when the run fails or is interrupted
(one ExitStack: client, endpoints mirror, fault proxy, fleet, store, tmpfs). All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from chaos import checks
from chaos.client import Start
from chaos.config import ChaosConfig
from chaos.disk import SmallDisk
from chaos.faults import TRICKLE_LATE_FACTOR, TRICKLE_SLACK_S, active_names
from chaos.fleet import wait_for
from chaos.observe import count_records, manifest_size
from chaos.report import ChaosReport
from chaos.setup import Run, prepare
from chaos.tear import VARIANTS, tear_any

TICK_S = 0.02
SYNC_S = 0.5
CRASH_LOOP_STARTS = 5  # starts in a row stopping by themselves without progress end the killing phase
REQUESTS_PER_PROMPT = 25  # more requests than this per prompt would be a retry storm
FINAL_ATTEMPTS = 4


def run_chaos(cfg: ChaosConfig, log: Any = print) -> ChaosReport:
    """Run the chaos test described by ``cfg``; returns its report (``report.ok``), its JSON already written."""
    t0 = time.monotonic()
    workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix=f"tokenmill-chaos-{cfg.seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
    report = ChaosReport(seed=cfg.seed, quick=cfg.quick, workdir=workdir, config=config)
    log(f"chaos: seed {cfg.seed}, at least {cfg.kills} client kills, {cfg.prompts} prompts; work directory {workdir}")
    disk = SmallDisk(workdir / "disk", cfg.disk_mb)
    pids: list[int] = []
    try:
        with contextlib.ExitStack() as stack:
            run = prepare(cfg, report, disk, stack, log)
            run.invariants.fetch = run.ctx.store.read
            report.timings["setup"] = time.monotonic() - t0
            try:
                _kill_phase(run, log)
                _machine_loss_phase(run, log)
                _final_phase(run, log)
                _check(run, log)
            except Exception as exc:
                _harness_failed(report, "the chaos harness stopped", exc)
            finally:
                _count_injected(run)
                pids = run.ctx.fleet.pids() + run.ctx.client.alive_pids()
                if not report.ok:
                    disk.keep_copy(run.out, workdir / "out-copy")
    except Exception as exc:
        _harness_failed(report, "setting up or tearing down failed", exc)
    except KeyboardInterrupt:
        report.interrupted = True
        report.check("harness", False, "interrupted by a signal; everything it started was stopped on the way out")
    _check_stopped(report, pids, disk)
    report.timings["total"] = time.monotonic() - t0
    report.write_json(cfg.json_path or workdir / "summary.json")
    return report


def _harness_failed(report: ChaosReport, what: str, exc: BaseException) -> None:
    path = report.workdir / "harness-error.txt"
    path.write_text(traceback.format_exc())
    report.check("harness", False, f"{what}: {exc!r} (traceback in {path})")


# ---- the killing phase ----------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Plan:
    """When and how the running client is to be stopped."""

    mode: str = ""
    after_s: float = 0.0
    manifest_size: int = 0
    termed_at: float | None = None  # when SIGTERM was sent (mode "term")


def _draw_kill(run: Run, done: set[str]) -> _Plan:
    """Each way of stopping the client once first (in a seeded order), then at random by their shares."""
    plan, u, rng = run.cfg.kill_plan, run.rng.random(), run.rng
    shares = (
        ("startup", plan.startup_share),
        ("resumed", plan.resumed_share),
        ("seal", plan.seal_share),
        ("term", plan.term_share),
    )
    mode, edge = "run", 0.0
    for name, share in shares:
        edge += share
        if u < edge:
            mode = name
            break
    untried = [m for m in ("startup", "resumed", "seal", "term", "run") if m not in done]
    if untried:
        mode = rng.choice(untried)
    if mode == "startup":
        return _Plan(mode, rng.uniform(*plan.startup_s))
    if mode in ("resumed", "seal"):
        return _Plan(mode, plan.seal_wait_s, manifest_size(run.out))
    return _Plan(mode, rng.uniform(*plan.run_s))


def _kill_due(run: Run, plan: _Plan) -> bool:
    client = run.ctx.client
    if plan.mode == "seal" and manifest_size(run.out) != plan.manifest_size:
        return True
    if plan.mode == "resumed" and client.current is not None and "resuming " in _read(Path(client.current.log)):
        return True
    return client.alive_s >= plan.after_s


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _kill_phase(run: Run, log: Any) -> None:
    """Start, kill, restart the client until enough kills are done and every fault track has run."""
    cfg, ctx, client = run.cfg, run.ctx, run.ctx.client
    began = time.monotonic()
    kills = crashes = 0
    next_sync = 0.0
    plan = _Plan()
    faults_seen: set[str] = set()
    modes_done: set[str] = set()  # ways of stopping the client used at least once
    budget = cfg.prompts * REQUESTS_PER_PROMPT
    log(f"chaos: killing phase (at least {cfg.kills} kills, at most {cfg.phase_max_s:.0f} s)")
    while True:
        now = time.monotonic()
        if now >= next_sync:
            ctx.fleet.sync()
            next_sync = now + SYNC_S
        for track in run.tracks:
            track.step(ctx, now - began)
        faults_seen.update(active_names(run.tracks))
        if ctx.proxy.requests > budget:
            run.overrun.append(f"{ctx.proxy.requests} requests for {cfg.prompts} prompts: the killing phase stopped")
            break
        if now - began > cfg.phase_max_s:
            run.overrun.append(f"the killing phase ran past {cfg.phase_max_s:.0f} s and was stopped")
            break
        if client.current is None:
            if kills >= cfg.kills and all(t.finished for t in run.tracks):
                break
            plan = _draw_kill(run, modes_done)
            client.start(plan.mode, count_records(run.out))
            faults_seen = set(active_names(run.tracks))
        elif (code := client.poll()) is not None:
            start = _ended(run, faults_seen)
            if code == 0:
                run.report.notes.append(f"the input was finished during the killing phase (start {start.index})")
                break
            if plan.termed_at is not None:
                _check_term(run, start)
                continue
            crashes = crashes + 1 if start.progress == 0 and not ctx.hold_kills else 0
            if crashes >= CRASH_LOOP_STARTS:
                run.report.notes.append(
                    f"{crashes} starts in a row stopped by themselves without progress; the killing phase ends "
                    f"here (last log: {start.log})"
                )
                break
        elif plan.termed_at is not None:
            if client.alive_s - plan.termed_at > cfg.kill_plan.term_wait_s:  # a hang: stop it, report it
                run.report.tally.problems.append(
                    f"start {client.current.index if client.current else '?'} did not stop within "
                    f"{cfg.kill_plan.term_wait_s:.0f} s of SIGTERM"
                )
                client.kill()
                _ended(run, faults_seen)
        elif not ctx.hold_kills and plan.mode == "term" and _kill_due(run, plan):
            client.send(signal.SIGTERM)
            plan.termed_at = client.alive_s
            modes_done.add(plan.mode)
            run.report.tally.add("client-sigterm")
        elif not ctx.hold_kills and _kill_due(run, plan):
            client.kill()
            kills += 1
            modes_done.add(plan.mode)
            start = _ended(run, faults_seen)
            if run.rng.random() < cfg.tear_share:
                _tear(run, start)
            if kills % 10 == 0:
                log(f"chaos: {kills} kills, {count_records(run.out)} of {cfg.prompts} prompts recorded")
        time.sleep(TICK_S)
    if client.current is not None:
        client.kill()
        _ended(run, faults_seen)
    for track in run.tracks:
        track.abort(ctx, time.monotonic() - began)
    run.report.timings["killing phase"] = time.monotonic() - began
    log(f"chaos: killing phase over: {kills} kills, {count_records(run.out)} of {cfg.prompts} prompts recorded")


def _check_term(run: Run, start: Start) -> None:
    """A SIGTERM stops the client cleanly: exit 3 saying to rerun (or, before its handler is installed, the
    default action)."""
    clean = start.ended == "SIGTERM" or (start.ended == "exit 3" and "rerun" in (start.message or ""))
    if not clean:
        run.report.tally.problems.append(f"start {start.index} after SIGTERM: {start.ended}, {start.message}")


def _ended(run: Run, faults: set[str]) -> Start:
    """Record how the client's process ended, then check the output (no client runs now)."""
    start = run.ctx.client.finish(count_records(run.out), sorted(faults))
    run.invariants.check(run.out, f"after start {start.index}")
    for torn in run.tears:
        if torn.repaired_by is None and torn.healed(run.out):
            torn.repaired_by = start.index
            torn.announced = "output repaired" in Path(start.log).read_text(errors="replace")
    return start


def _tear(run: Run, start: Start) -> None:
    """Simulate a machine crash after this kill: tear the un-synced tail of one file (variants in turn)."""
    first = VARIANTS[len(run.tears) % len(VARIANTS)]
    torn = tear_any(run.out, run.rng, first, start.index)
    if torn is not None:
        run.tears.append(torn)
        run.report.tally.add("torn-write", detail=f"{torn.variant}: {torn.done}")


# ---- machine losses -------------------------------------------------------------------------------------------

TAKEN_OVER = "took over from"  # what a start says when it takes a lost directory's records over from the remote


def _machine_loss_phase(run: Run, log: Any) -> None:
    """Lose the machine again and again: once a start has uploaded a new shard, it is SIGKILLed and its whole
    output directory deleted (every other time the directory goes first, under the running client). Each next
    start runs on a fresh directory and must take the records over from the remote prefix."""
    cfg, ctx, client = run.cfg, run.ctx, run.ctx.client
    if cfg.machine_losses <= 0:
        return
    _quiesce(run)
    began = time.monotonic()
    log(f"chaos: machine-loss phase ({cfg.machine_losses} times the client and its whole output directory)")
    for loss in range(cfg.machine_losses):
        shards = len(ctx.store.names("completions_"))
        started = client.start("machine-loss", count_records(run.out))
        if loss:
            run.fresh_starts.append(started.index)
        deadline = time.monotonic() + cfg.machine_loss_wait_s
        while client.poll() is None and time.monotonic() < deadline and len(ctx.store.names("completions_")) <= shards:
            time.sleep(0.05)
        if client.poll() is not None:  # it stopped (or finished) by itself before a new shard went up
            start = _ended(run, set())
            run.report.notes.append(f"machine loss {loss + 1}: start {start.index} ended first ({start.ended})")
            if start.ended == "exit 0":
                break
            continue
        under = loss % 2 == 1
        if under:
            shutil.rmtree(run.out)  # the disk goes first, the machine a moment later
        client.kill()
        if not under:
            start = _ended(run, set())  # the directory as the client left it (tears repaired, no duplicate)
            shutil.rmtree(run.out)
        run.invariants.lose_machine()
        if under:
            start = _ended(run, set())
        how = "directory deleted under the running client, then killed" if under else "killed, directory deleted"
        run.report.tally.add("machine-loss", detail=f"start {start.index} after {start.lived_s:.1f} s: {how}")
    run.fresh_starts.append(len(client.starts))  # the next start (the last run's first) is on a fresh one too
    run.report.timings["machine-loss phase"] = time.monotonic() - began


def _check_taken_over(run: Run) -> None:
    """Every start on a fresh directory after a machine loss took the records over from the remote prefix."""
    starts = [s for s in run.report.starts if s.index in run.fresh_starts]
    silent = [s.index for s in starts if TAKEN_OVER not in _read(Path(s.log))]
    losses = int(run.report.tally.counts.get("machine-loss", 0))
    run.report.check(
        "a lost directory is taken over from the remote",
        not silent and losses >= min(1, run.cfg.machine_losses),
        f"starts {silent} did not say they took over"
        if silent
        else f"{losses} machine losses; each of the {len(starts)} next starts took the records over from the remote",
    )


# ---- the last run ---------------------------------------------------------------------------------------------


def _quiesce(run: Run) -> None:
    """No fault in force: server and network faults off, store up, disk free, every server up."""
    ctx = run.ctx
    ctx.fleet.set_faults({})
    ctx.proxy.set_rates({})
    ctx.store.up()
    ctx.disk.free()
    ctx.holds.clear()
    if not wait_for(lambda: all(s.get("state") == "up" for s in ctx.fleet.state().get("servers", [])), 30.0):
        run.report.notes.append("not every server was up when the last run started")


def _final_phase(run: Run, log: Any) -> None:
    """Run to the end without faults. The first start is killed the moment every prompt is recorded (its
    uploads, remote manifest and marker still to come); a next one must finish everything."""
    cfg, client = run.cfg, run.ctx.client
    _quiesce(run)
    began = time.monotonic()
    deadline = began + cfg.final_max_s
    extra = ("--concurrency", str(cfg.final_concurrency))
    finished = False
    for attempt in range(FINAL_ATTEMPTS):
        at_end = attempt == 0
        log(f"chaos: last run{' again' if attempt else ''}, without faults" + (", killed at the end" * at_end))
        client.start("end" if at_end else "none", count_records(run.out), extra)
        while client.poll() is None and time.monotonic() < deadline:
            if at_end and count_records(run.out) >= cfg.prompts:
                client.kill()
                break
            time.sleep(TICK_S)
        if client.poll() is None:  # out of time
            client.kill()
            _ended(run, set())
            break
        start = _ended(run, set())
        if start.ended == "exit 0":
            finished = True
            break
        if not start.killed:
            run.report.notes.append(f"last run {attempt + 1} ended {start.ended}: {start.message}")
    took = time.monotonic() - began
    run.report.timings["last run"] = took
    detail = f"finished and uploaded in {took:.1f} s" if finished else f"not finished after {took:.0f} s"
    run.report.check("last run finishes", finished, detail)


# ---- checks ---------------------------------------------------------------------------------------------------


def _check(run: Run, log: Any) -> None:
    cfg, report, ctx = run.cfg, run.report, run.ctx
    began = time.monotonic()
    log("chaos: checking the output and the remote copy")
    report.checks.append(checks.verify_cli(run.out, run.job, run.env))
    report.checks.append(checks.verify_prefix_cli(run.job, run.env))
    report.checks.append(checks.exactly_once(run.input_ids, run.out, ctx.store.read))
    _check_taken_over(run)
    report.checks.append(checks.no_torn_shard(run.out))
    inv = run.invariants
    report.check(
        "no duplicate, no sealed shard changed (after every stop)",
        not inv.violations,
        "; ".join(inv.violations[:5]) or f"checked after each of {inv.checks} stops; {len(inv.sealed)} sealed shards",
    )
    report.checks.append(checks.repairs(run.tears, report.starts))
    report.checks.append(checks.crash_loop(report.starts, cfg.progress_window_s))
    report.checks.append(checks.tracebacks(report.starts, run.out))
    all_up, said = ctx.fleet.status()
    restarts = sum(int(s.get("restarts", 0)) for s in ctx.fleet.state().get("servers", []))
    report.check("fleet back to full strength", all_up, f"`tokenmill fleet status`: {said}; {restarts} restarts")
    _count_injected(run)
    kills = report.kills()
    report.check("client kills", kills >= cfg.kills, f"{kills} SIGKILLs (wanted at least {cfg.kills})")
    missing = [k for k, n in report.tally.counts.items() if n == 0 and k not in report.tally.skipped]
    shown = len(report.tally.counts) - len(report.tally.skipped)
    report.check("every fault kind injected", not missing, f"not injected: {missing}" if missing else f"{shown} kinds")
    report.check(
        "every fault survived as it should",
        not report.tally.problems,
        "; ".join(report.tally.problems) or "servers restarted, the store came back, the disk stopped the client",
    )
    held, timeout = ctx.proxy.trickle_held_s, cfg.connect_timeout_s + cfg.read_timeout_s
    full = [h for h in held if h >= timeout - TRICKLE_SLACK_S]
    report.check(
        "slow answers given up in time",
        bool(full) and max(held) <= timeout * TRICKLE_LATE_FACTOR,
        f"{len(held)} trickled answers ({len(full)} lasted until the client's own timeout); the longest kept "
        f"its client {max(held, default=0):.1f} s (request timeout {timeout:.0f} s, at most "
        f"{timeout * TRICKLE_LATE_FACTOR:.0f} s allowed)",
    )
    report.requests = {
        "received by the proxy": ctx.proxy.requests,
        "generation requests forwarded": ctx.proxy.forwarded,
    }
    budget = cfg.prompts * REQUESTS_PER_PROMPT
    report.check(
        "bounded in time and requests",
        not run.overrun and ctx.proxy.requests <= budget,
        "; ".join(run.overrun)
        or f"{ctx.proxy.requests} requests for {cfg.prompts} prompts (at most {budget}); killing phase "
        f"{report.timings.get('killing phase', 0):.0f} s of at most {cfg.phase_max_s:.0f} s",
    )
    report.timings["checks"] = time.monotonic() - began


def _count_injected(run: Run) -> None:
    """Bring the tally up to date: client kills, and the faults the servers and the proxy counted."""
    tally = run.report.tally
    tally.counts["client-sigkill"] = run.report.kills() - int(tally.counts.get("machine-loss", 0))
    with contextlib.suppress(Exception):  # the servers may be gone already (an interrupted run)
        run.ctx.fleet.sync()
    for kind, n in {**run.ctx.fleet.counts(), **run.ctx.proxy.counts}.items():
        tally.counts[kind] = n


def _check_stopped(report: ChaosReport, pids: list[int], disk: SmallDisk) -> None:
    """After tear-down: no process of the run is left, and the small disk is unmounted."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if _running(p)]
    for pid in alive:  # not left behind, but reported
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    ok = not alive and not disk.mounted
    detail = f"left running: {alive}" if alive else f"{len(pids)} processes gone"
    detail += "; tmpfs unmounted" if not disk.mounted else "; tmpfs still mounted"
    report.check("everything stopped", ok, detail)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
