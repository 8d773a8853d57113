"""The event logs of a split run read as one job, for ``tokenmill status`` and ``tokenmill report``.

Each writer (the default one, each partition) keeps its own log (``events.jsonl``, ``events.pNNN.jsonl``); status
and report show the whole job:

- :func:`merge_ticks` merges ticks of several clients taken at about the same time into one: the clients'
  counters and rates are summed, a server that several clients watch appears once (their client-side numbers
  for it summed, its scraped numbers from the newest look), the ETA is the slowest client's;
- :func:`combined_events` reads every log in time order as one: a ``start`` when the first client starts, one
  merged ``tick`` per tick of any client (of the clients running then), the first running client's verdicts,
  an ``end`` when the last client has ended, and any other record as it is. A single log is read as it is.

Ticks are read in their run's format and merged in today's (:func:`~tokenmill.monitor.snapshot.upgrade_tick`).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, read_events, run_format
from tokenmill.monitor.snapshot import upgrade_tick

_LOG = re.compile(r"events(?:\.p\d{3,})?\.jsonl")
# client numbers that add up over clients; the others are handled one by one below
_SUMMED = ("completed", "failed", "skipped", "retries", "inflight", "comp_s", "client_tok_s", "prompt_tokens",
           "client_tokens", "limit", "cpu", "answers", "truncated", "rows_read", "multi_turn_rows", "abandoned",
           "abandoned_tokens", "outlived", "repeatedly_abandoned", "upload_pending",
           "upload_pending_bytes")  # fmt: skip
_ROW_SUMMED = ("inflight", "limit", "completed", "errors", "client_tok_s", "client_tokens", "inflight_avg")


def event_logs(out: Path) -> list[Path]:
    """The event logs in ``out``: the default writer's first, then each partition's."""
    try:
        found = sorted(p for p in out.iterdir() if _LOG.fullmatch(p.name))
    except OSError:
        return []
    return sorted(found, key=lambda p: (p.name != EVENTS_FILE, p.name))


def merge_ticks(ticks: list[dict[str, Any]]) -> dict[str, Any]:
    """One tick (today's format) for several clients' ticks (today's format), newest last."""
    if len(ticks) == 1:
        return ticks[0]
    newest = max(ticks, key=lambda r: float(r.get("t") or 0.0))
    clients = [dict(r.get("client") or {}) for r in ticks]
    client: dict[str, Any] = dict(newest.get("client") or {})
    for key in _SUMMED:
        client[key] = _sum(c.get(key) for c in clients)
    before = max(_num(c.get("done")) - _num(c.get("completed")) - _num(c.get("failed")) for c in clients)
    client["done"] = before + _num(client.get("completed")) + _num(client.get("failed"))
    totals = [c.get("total") for c in clients]
    client["total"] = sum(_num(t) for t in totals) if all(isinstance(t, int) for t in totals) else None
    if client["total"] is not None:
        client["total"] = int(client["total"])
    etas = [_num(c["eta_s"]) for c in clients if isinstance(c.get("eta_s"), int | float)]
    client["eta_s"] = max(etas) if etas else None
    lags = [_num(c["loop_lag_s"]) for c in clients if isinstance(c.get("loop_lag_s"), int | float)]
    client["loop_lag_s"] = max(lags) if lags else None
    client["waiting"] = any(bool(c.get("waiting")) for c in clients)
    client["last_failure"] = next((c["last_failure"] for c in clients if c.get("last_failure")), None)
    oldest = [_num(c["upload_oldest_s"]) for c in clients if isinstance(c.get("upload_oldest_s"), int | float)]
    client["upload_oldest_s"] = max(oldest) if oldest else None
    for key in ("upload_error", "held"):
        client[key] = next((c[key] for c in clients if c.get(key)), None)
    for key in ("finish_reasons", "errors", "counts"):  # counts: the metric table's run counters
        client[key] = _add_dicts(c.get(key) for c in clients)
    for key in ("output_len", "completed_len"):
        client[key] = _add_histograms([c.get(key) for c in clients])
    servers = _merge_rows(sorted(ticks, key=lambda r: float(r.get("t") or 0.0)))
    decoded = [s["decode_tok_s"] for s in servers if isinstance(s.get("decode_tok_s"), int | float)]
    client["decode_tok_s"] = sum(decoded) if decoded else None
    verdicts: dict[str, Any] = {}
    for r in ticks:
        for v in r.get("verdicts") or []:
            if isinstance(v, dict):
                verdicts.setdefault(str(v.get("rule")), v)
    return {
        **newest,
        "elapsed_s": max(_num(r.get("elapsed_s")) for r in ticks),
        "client": client,
        "servers": servers,
        "verdicts": list(verdicts.values()),
        "binding": next((r["binding"] for r in ticks if r.get("binding")), None),
    }


def combined_events(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every record of the logs ``paths`` as one job's log (see the module docstring)."""
    logs = list(paths)
    if len(logs) == 1:
        yield from read_events(logs[0])
        return
    streams = [_tagged(i, path) for i, path in enumerate(logs)]
    fmt: dict[int, int] = {}
    latest: dict[int, dict[str, Any]] = {}
    running: dict[int, bool] = {}  # writer -> its run finished (False while it runs)
    job_run = ""
    all_finished = True
    for t, writer, _, rec in heapq.merge(*streams):
        kind = rec.get("kind")
        if kind == "start":
            fmt[writer] = run_format(rec)
            latest.pop(writer, None)
            if not running:
                job_run, all_finished = str(rec.get("run") or ""), True
                yield {**rec, "format": EVENT_FORMAT}
            running[writer] = False
        elif kind == "tick" and writer in running:
            latest[writer] = upgrade_tick(rec, fmt.get(writer, 1))
            yield {**merge_ticks(list(latest.values())), "kind": "tick", "t": t, "run": job_run}
        elif kind == "verdicts" and running and writer == min(running):
            yield {**rec, "run": job_run}
        elif kind == "end" and writer in running:
            all_finished = all_finished and bool(rec.get("finished"))
            running.pop(writer)
            latest.pop(writer, None)
            if not running:
                yield {**rec, "run": job_run, "finished": all_finished}
        elif kind not in ("start", "tick", "verdicts", "end"):
            yield rec  # other records (e.g. a re-flag's steps) as they are


def _tagged(writer: int, path: Path) -> Iterator[tuple[float, int, int, dict[str, Any]]]:
    """The records of one log as (time, writer, position, record), in the order heapq.merge needs."""
    for n, rec in enumerate(read_events(path)):
        yield float(rec.get("t") or 0.0), writer, n, rec


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _sum(values: Iterable[Any]) -> int | float | None:
    found = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return sum(found) if found else None


def _add_dicts(parts: Iterable[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            out[str(key)] = out.get(str(key), 0) + _num(value)
    return out


def _add_histograms(parts: list[Any]) -> dict[str, Any] | None:
    found: list[dict[str, Any]] = [p for p in parts if isinstance(p, dict) and p.get("bounds") is not None]
    if not found:
        return None
    base = found[0]
    if any(p.get("bounds") != base["bounds"] or len(p.get("counts") or []) != len(base["counts"]) for p in found):
        largest: dict[str, Any] = max(found, key=lambda p: _num(p.get("count")))
        return largest  # not addable: the largest stands
    return {
        "bounds": base["bounds"],
        "counts": [sum(int(p["counts"][i]) for p in found) for i in range(len(base["counts"]))],
        "sum": sum(_num(p.get("sum")) for p in found),
        "count": sum(int(_num(p.get("count"))) for p in found),
    }


def _merge_rows(ticks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Server rows by URL: client-side numbers summed over the clients, the rest from the newest tick."""
    rows: dict[str, dict[str, Any]] = {}
    sums: dict[str, dict[str, list[Any]]] = {}
    for tick in ticks:  # oldest first: the newest look at a server wins its scraped numbers
        for row in tick.get("servers") or []:
            if not isinstance(row, dict):
                continue
            url = str(row.get("url"))
            rows[url] = dict(row)
            for key in _ROW_SUMMED:
                sums.setdefault(url, {}).setdefault(key, []).append(row.get(key))
    for url, row in rows.items():
        for key, values in sums[url].items():
            row[key] = _sum(values)
        row["usable"] = row.get("usable", True)
    return list(rows.values())
