"""The report page: one self-contained HTML file (CSS inline, figures as data: URLs)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from tokenmill.fmt import UNKNOWN, duration, pct
from tokenmill.monitor.lines import cut_text, expected_text, scaled, time_scale_text, upload_text, waste_text
from tokenmill.report.data import RunData, VerdictSpan
from tokenmill.sources.mapping import conversation_policy

if TYPE_CHECKING:
    from tokenmill.monitor.snapshot import Snapshot

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 24px auto; max-width: 1060px;
       color: #1d2430; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.sub { color: #667; margin-top: 4px; }
table { border-collapse: collapse; font-size: 0.88em; margin: 8px 0; }
th, td { border: 1px solid #d9dde3; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f3f5f8; padding: 1px 4px; border-radius: 3px; }
figure { margin: 12px 0 24px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #556; font-size: 0.85em; }
.critical { color: #b00020; font-weight: 600; } .warning { color: #a15c00; font-weight: 600; } .info { color: #225; }
"""


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return UNKNOWN
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _clock(data: RunData, offset: float) -> str:
    return dt.datetime.fromtimestamp(data.t0 + offset, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _state(data: RunData) -> str:
    if data.ended is None:
        return "in progress or interrupted"
    return "finished" if data.ended.get("finished") else "stopped"


def summary_rows(data: RunData) -> list[tuple[str, str]]:
    """The summary table: from summary.json when the last run wrote one, else from the last tick."""
    s = data.summary
    last = data.last_snapshot

    def now(name: str) -> Any:  # a number of the last tick
        return None if last is None else getattr(last, name)

    start = data.runs[-1] if data.runs else {}
    rows = [("output", str(data.out)), ("runs in this output", str(len(data.runs)))]
    note = (s.get("time_scale") if s is not None else None) or (time_scale_text(last) if last else None)

    def rate(text: str) -> str:
        return escape(scaled(text, note))

    if s is not None:
        rows += [
            ("state", "finished" if s.get("finished") else "stopped"),
            ("model / api", f"{s.get('model')} / {s.get('api')}"),
            ("prompts (input rows)", _fmt(s.get("total_rows"))),
            ("completed (all runs)", _fmt(s.get("completed_total"))),
            ("failed (all runs)", _fmt(s.get("failed_total"))),
            ("skipped bad rows", _fmt(s.get("skipped"))),
            ("servers / GPUs", f"{len(s.get('servers') or [])} / {_fmt(s.get('gpus'))}"),
            ("decode tok/s (servers, aggregate)", rate(_fmt(s.get("decode_tok_s")))),
            ("decode tok/s per GPU", rate(_fmt(s.get("decode_tok_s_per_gpu")))),
            ("completions/s (client)", rate(_fmt(s.get("completions_per_s"), 2))),
            ("output tok/s (client-effective)", rate(_fmt(s.get("client_tok_s")))),
            ("avg output tokens", _fmt(s.get("avg_output_tokens"), 1)),
            ("elapsed (last run)", duration(s.get("elapsed_s"))),
            ("retries (last run)", _fmt(s.get("retries"))),
            ("binding resource", str(s.get("binding") or "-")),
            ("decode rate vs the hardware", escape(str(s.get("expected") or "-"))),
        ]
    else:
        rows += [
            ("state", _state(data)),
            ("model / api", f"{start.get('model')} / {start.get('api')}"),
            ("prompts (input rows)", _fmt(now("total"))),
            ("done (completed + failed)", _fmt(now("done"))),
            ("failed (this run)", _fmt(now("failed"))),
            ("decode tok/s (servers, now)", rate(_fmt(now("decode_tok_s")))),
            ("completions/s (client, now)", rate(_fmt(now("comp_s"), 2))),
            ("output tok/s (client-effective, now)", rate(_fmt(now("client_tok_s")))),
            ("ETA", duration(now("eta_s"))),
            ("decode rate vs the hardware (now)", escape((expected_text(last) if last else "") or "-")),
        ]
    if last is not None:
        rows += _last_run_rows(data, last)
    return rows


def _last_run_rows(data: RunData, last: Snapshot) -> list[tuple[str, str]]:
    """The rows the last tick of the last run says: answers cut, abandoned, the upload, a pause, multi-turn rows."""
    rows = [
        ("answers cut at max_tokens (last run)", cut_text(last.truncated, last.answers, last.max_tokens)),
        ("abandoned on read timeouts (last run)", escape(waste_text(last) or "-")),
    ]
    upload = _upload(data.upload) if data.upload is not None else upload_text(last)
    if upload:
        rows.append(("upload", escape(upload)))
    if last.held and data.upload is None:
        rows.append(("generation paused", escape(last.held)))
    if last.rows_read:
        turns = f"{last.multi_turn_rows:,} of {last.rows_read:,} rows"
        if last.multi_turn_rows and last.conversation_turns:
            turns += f": {conversation_policy(last.conversation_turns)}"
        rows.append(("rows with several user turns", escape(turns)))
    return rows


def _upload(rec: dict[str, Any]) -> str:
    """Where the last run's upload ended, from its ``upload`` record."""
    pending = int(rec.get("pending") or 0)
    if not pending:
        return "every sealed shard uploaded" if rec.get("complete") else ""
    error = f"; store error: {rec['error']}" if rec.get("error") else ""
    return f"{pending:,} shard(s) not uploaded at the end{error} (rerun the same command to upload them)"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers) if any(headers) else ""
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    head_row = f"<tr>{head}</tr>" if head else ""
    return f"<table>{head_row}{''.join(body)}</table>"


def _verdicts(data: RunData, spans: Sequence[VerdictSpan]) -> str:
    if not spans:
        return "<p>The doctor found nothing that binds harder than the GPUs themselves.</p>"
    rows = []
    for sp in spans:
        v = sp.verdict
        sev = escape(str(v.get("severity", "info")))
        where = ", ".join(v.get("servers") or []) or "client"
        caveats = list(v.get("caveats") or [])
        changes = "<br>".join(
            f"<code>{escape(c)}</code>"
            + (f" <small>({escape(caveats[i])})</small>" if i < len(caveats) and caveats[i] else "")
            for i, c in enumerate(v.get("changes") or [])
        )
        preds = "<br>".join(escape(p.get("text", "")) for p in v.get("predictions") or [])
        evidence = "<br>".join(f"{escape(str(k))}: {escape(str(val))}" for k, val in v.get("evidence") or [])
        rows.append(
            [
                escape(_clock(data, sp.start)),
                "still shown" if sp.end is None else escape(duration(sp.end - sp.start)),
                f'<span class="{sev}">{escape(str(v.get("title", v.get("rule"))))}</span>',
                escape(where),
                escape(str(v.get("summary", ""))) + f"<br><small>{evidence}</small>",
                escape(str(v.get("advice", "")))
                + (f"<br>{changes}" if changes else "")
                + (f"<br><small>{preds}</small>" if preds else ""),
            ]
        )
    return _table(["from", "for", "verdict", "where", "evidence", "recommendation"], rows)


def _gain(x: Any) -> str:
    return f"{x * 100:+.0f}%" if isinstance(x, int | float) else ""


def _autotune(data: RunData) -> str:
    """Every step --autotune took: the change, where, predicted against measured gain, and what became of it."""
    rows = []
    for rec in data.autotune:
        measured = rec.get("measured") if isinstance(rec.get("measured"), dict) else {}
        shown = ""
        if measured:
            shown = f"{_gain(measured.get('gain'))} (s.e. {_gain(measured.get('stderr')).lstrip('+')})"
            parts = [f"own rate {_fmt(measured.get('before_tok_s'))} → {_fmt(measured.get('after_tok_s'))} tok/s"]
            if measured.get("gain_vs_peers") is not None:
                parts.append(f"against its peers {_gain(measured.get('gain_vs_peers'))}")
            shown += f"<br><small>{escape('; '.join(parts))}</small>"
        what = str(rec.get("outcome") or rec.get("reason") or rec.get("error") or rec.get("text") or "")
        rows.append(
            [
                escape(duration(rec.get("at"))),
                escape(str(rec.get("step", ""))),
                f"<code>{escape(str(rec['change']))}</code>" if rec.get("change") else "",
                escape(str(rec.get("canary") or "")),
                escape(_gain(rec.get("predicted_gain"))),
                shown,
                escape(what),
            ]
        )
    return _table(["after", "step", "change", "canary", "predicted", "measured", "outcome"], rows)


def _scale_mark(scale: float | None) -> str:
    """`` (x50, time-scaled)`` beside a time-scaled twin's rate."""
    return f" (x{1 / scale:.3g}, time-scaled)" if scale and scale != 1.0 else ""


def _servers(data: RunData) -> str:
    rows = []
    last = data.last_snapshot
    for s in last.servers if last is not None else []:
        rows.append(
            [
                escape(s.url),
                _fmt(s.completed),
                _fmt(s.errors),
                _fmt(s.decode_tok_s) + _scale_mark(s.time_scale),
                pct(s.expected_share),
                f"{_fmt(s.running)}/{_fmt(s.max_running)}",
                _fmt(s.queued),
                pct(s.kv_usage),
                pct(s.state_usage),
                f"{_fmt(s.inflight)}/{_fmt(s.limit)}",
                "set aside" if not s.usable else ("up" if s.healthy is not False else "down"),
            ]
        )
    if not rows:
        return ""
    return _table(
        [
            "server",
            "completed",
            "errors",
            "decode tok/s",
            "of expected",
            "running",
            "queue",
            "KV",
            "state",
            "client",
            "health",
        ],
        rows,
        numeric=(1, 2, 3, 4, 5, 6, 7, 8, 9),
    )


def render(data: RunData, figures: Sequence[tuple[str, str, bytes]], quality: str = "") -> str:
    """The page; ``figures`` are (name, title, png bytes); ``quality`` the corpus quality section's HTML."""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>tokenmill report: {escape(str(data.out))}</title><style>{CSS}</style></head><body>",
        "<h1>tokenmill run report</h1>",
        f"<p class='sub'>{escape(str(data.out))} — {data.ticks_total:,} snapshots from "
        f"{escape(_clock(data, 0))}; generated {escape(dt.datetime.now(tz=dt.UTC).strftime('%Y-%m-%d %H:%M UTC'))}</p>",
        "<h2>Summary</h2>",
        _table(["", ""], [[escape(k), escape(v)] for k, v in summary_rows(data)]),
        "<h2>Doctor verdicts</h2>",
        _verdicts(data, data.spans),
    ]
    if data.autotune:
        parts += ["<h2>Autotune</h2>", _autotune(data)]
    failures = data.failures_by_type
    if failures:
        parts.append("<h2>Failed attempts by error</h2>")
        parts.append(_table(["error", "attempts"], [[escape(k), _fmt(v)] for k, v in sorted(failures.items())], (1,)))
    servers = _servers(data)
    if servers:
        parts += ["<h2>Servers at the last snapshot</h2>", servers]
    parts.append("<h2>Over time</h2>")
    for name, title, png in figures:
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure id='{escape(name)}'><img alt='{escape(title)}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{escape(title)} ({escape(name)}.png alongside this file)</figcaption></figure>"
        )
    if not figures:
        parts.append("<p>No snapshots to plot yet.</p>")
    if quality:
        parts.append(quality)
    parts.append("</body></html>")
    return "\n".join(parts)
