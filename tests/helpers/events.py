"""An event log for tests: ticks shaped like the monitor's (current and v1) and a run's events file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenmill.histogram import Histogram
from tokenmill.monitor.client import OUTPUT_LEN_BUCKETS
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog
from tokenmill.monitor.snapshot import RecordedVerdict, ServerRow, Snapshot

URLS = ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000")


def _hist(i: int) -> Histogram:
    hist = Histogram(OUTPUT_LEN_BUCKETS)
    for n in range(i + 1):
        hist.observe(100 + (n * 37) % 900)
    return hist


def _verdict_shown(i: int) -> bool:
    return i > 20


def tick_event(i: int, run_done: int) -> dict[str, Any]:
    """Tick ``i`` of a run as this version writes it: a snapshot's event, plus the client metrics."""
    rows = []
    for k, url in enumerate(URLS):
        running = min(131, 20 + 2 * i) if k < 2 else 40
        rows.append(
            ServerRow(
                url, 64, 64, 10 * i, i // 40, client_tok_s=19.0 * running, usable=True, problem=None,
                client_tokens=500 * i, healthy=k != 2 or i % 50 < 45, running=running, max_running=131,
                queued=60 if running == 131 else 0, kv_usage=round(0.2 + 0.1 * k, 3),
                state_usage=round(running / 131, 3) if k < 2 else None, decode_tok_s=20.0 * running, gpus=1,
                decoded_tokens=1000 * i,
            )
        )  # fmt: skip
    verdict = RecordedVerdict(
        "state-pool-bound", "state-pool bound", "state pool", "warning", "running 131/131", "2/3 servers", "..."
    )
    snap = Snapshot(
        elapsed_s=10.0 * i, done=run_done + 3 * i, total=2000, completed=3 * i, failed=i // 30, skipped=0,
        retries=i // 10, inflight=192, comp_s=3.0, client_tok_s=sum(r.client_tok_s for r in rows), eta_s=600.0,
        servers=rows, waiting=False, last_failure=None, decode_tok_s=sum(r.decode_tok_s or 0 for r in rows),
        prompt_tokens=300 * i, client_tokens=500 * i, limit=192, verdicts=(verdict,) if _verdict_shown(i) else (),
    )  # fmt: skip
    tick = snap.to_event()
    tick["client"].update(
        finish_reasons={"stop": 2 * i, "length": i}, errors={"TransientError": i // 10}, output_len=_hist(i).as_dict()
    )
    return tick


def _v1_tick(i: int, run_done: int) -> dict[str, Any]:
    """The same tick as the version before format 2 wrote it (its ``tick_record``, key for key)."""
    servers = []
    for k, url in enumerate(URLS):
        running = min(131, 20 + 2 * i) if k < 2 else 40
        servers.append(
            {
                "url": url,
                "usable": True,
                "healthy": k != 2 or i % 50 < 45,
                "running": running,
                "max_running": 131,
                "queued": 60 if running == 131 else 0,
                "kv": round(0.2 + 0.1 * k, 3),
                "state": round(running / 131, 3) if k < 2 else None,
                "tok_s": 20.0 * running,
                "client_tok_s": 19.0 * running,
                "prompt_tok_s": None,
                "inflight": 64,
                "inflight_avg": None,
                "limit": 64,
                "completed": 10 * i,
                "errors": i // 40,
                "gpus": 1,
                "output_tokens": 1000 * i,
            }
        )
    return {
        "elapsed": 10.0 * i,
        "client": {
            "done": run_done + 3 * i,
            "total": 2000,
            "completed": 3 * i,
            "failed": i // 30,
            "skipped": 0,
            "retries": i // 10,
            "inflight": 192,
            "limit": 192,
            "comp_s": 3.0,
            "tok_s": sum(s["client_tok_s"] for s in servers),
            "server_tok_s": sum(s["tok_s"] for s in servers),
            "eta_s": 600.0,
            "prompt_tokens": 300 * i,
            "completion_tokens": 500 * i,
            "cpu": None,
            "loop_lag_s": None,
            "finish_reasons": {"stop": 2 * i, "length": i},
            "errors": {"TransientError": i // 10},
            "output_len": _hist(i).as_dict(),
        },
        "servers": servers,
        "verdicts": ["state-pool-bound"] if _verdict_shown(i) else [],
        "binding": None,
    }


def write_events(out: Path, ticks: int = 120, runs: int = 2, fmt: int = EVENT_FORMAT) -> Path:
    """A two-run event log of three servers (two hybrids hitting their state cap), verdicts included; ``fmt`` 1
    writes it as the version before the format number did."""
    out.mkdir(parents=True, exist_ok=True)
    clock = {"t": 1_790_000_000.0}
    log = EventLog(out / EVENTS_FILE, "r0", wall=lambda: clock["t"])
    verdict = {
        "rule": "state-pool-bound",
        "binds": "state pool",
        "title": "state-pool bound",
        "severity": "warning",
        "servers": list(URLS[:2]),
        "of_servers": 3,
        "summary": "running 131/131 with 60 queued; state pool 99%, KV only 31%",
        "evidence": [["running / max running", "131/131"], ["cap from the state pool", "394 slots // 3"]],
        "advice": "The recurrent-state (Mamba) pool limits how many requests run at once.",
        "changes": ["--disable-radix-cache --max-running-requests 380", "--mamba-ssm-dtype bfloat16"],
        "predictions": [
            {"change": "--disable-radix-cache --max-running-requests 380", "text": "max running 131 -> 380"}
        ],
    }
    done = 0
    for run in range(runs):
        log.run_id = f"r{run}"
        start: dict[str, Any] = {"format": fmt} if fmt > 1 else {}
        start.update(model="qwen3.6-35b-a3b", api="openai-chat", servers=list(URLS), total=2000, done_before=done)
        log.write("start", **start)
        for i in range(ticks):
            clock["t"] += 10.0
            log.write("tick", **(tick_event(i, done) if fmt > 1 else _v1_tick(i, done)))
            if i == 22:
                log.write("verdicts", verdicts=[verdict])
        done += 3 * ticks
        clock["t"] += 5.0
        log.write("end", finished=run == runs - 1, elapsed_s=10.0 * ticks)
        clock["t"] += 600.0  # a pause before the rerun
    log.close()
    return out
