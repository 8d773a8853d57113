"""Regenerate the docs' tables that are read off the code's own tables (``--check``: fail if one is stale).

Each table sits in its page between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` and is rendered from the
table the code runs on, so the page cannot say something the code does not do:

- ``doctor-rules`` in docs/observability.md, from ``tokenmill.doctor.rules.RULES`` (thresholds with their defaults
  from ``DoctorSpec``);
- ``apis`` in docs/compat.md, from the backends' registry (``tokenmill.backends.Backend.registry``);
- ``quality-signals`` and ``quality-selectors`` in docs/quality.md, from ``tokenmill.quality.registry``;
- ``metrics``, ``alerts`` and ``panels`` in docs/observability.md, from ``tokenmill.run.metrics.METRICS`` (what the
  exporter serves) and the generated rules and board (``tokenmill.observe``).
- ``export-formats`` in docs/quality.md, from ``tokenmill.export.formats.FORMATS``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from tokenmill.backends import Backend  # noqa: E402
from tokenmill.config import DoctorSpec  # noqa: E402
from tokenmill.config.observe import AlertSpec  # noqa: E402
from tokenmill.doctor.rules import RULES  # noqa: E402
from tokenmill.export.formats import FORMATS  # noqa: E402
from tokenmill.observe.board import PANELS  # noqa: E402
from tokenmill.observe.rules import alerts as alert_rules  # noqa: E402
from tokenmill.quality.registry import SELECTORS, SIGNALS  # noqa: E402
from tokenmill.run.metrics import METRICS  # noqa: E402

_SETTING = re.compile(r"(?<![\w`])([a-z][a-z0-9]*(?:[_.][a-z0-9]+)+)(?![\w`])")  # max_tokens, retry.read_timeout_s


def _markdown(when: str) -> str:
    """A rule's condition as the docs write it: settings in backticks (a doctor threshold with its default), signs."""

    def setting(m: re.Match[str]) -> str:
        name = m.group(1)
        field = DoctorSpec.model_fields.get(name)
        return f"`{name}` ({field.default:g})" if field is not None else f"`{name}`"

    text = _SETTING.sub(setting, when)
    return text.replace(">=", "\u2265").replace(" x ", " \u00d7 ")  # greater-or-equal, times


def doctor_rules() -> list[str]:
    rows = ["| rule | binds | fires when |", "|---|---|---|"]
    for r in RULES:
        rows.append(f"| {r.id} | {r.binds or '(not a throughput limit)'} | {_markdown(r.when)} |")
    return rows


def apis() -> list[str]:
    rows = ["| `api` | request | chat template applied by | token ids (`save_token_ids`) |", "|---|---|---|---|"]
    for kind, cls in sorted(Backend.registry.items()):
        template = "the server" if cls.server_template else "the client, for a chat prompt (the job's `tokenizer`)"
        ids = "the server's" if cls.prompt_ids else "the answer's from the server, the prompt's from the `tokenizer`"
        rows.append(f"| `{kind}` | `POST {cls.path}` | {template} | {ids} |")
    return rows


def quality_signals() -> list[str]:
    return ["| flag | fires when |", "|---|---|", *(f"| `{s.name}` | {s.fires} |" for s in SIGNALS)]


def quality_selectors() -> list[str]:
    return [f"`--drop` takes any of `{', '.join(SELECTORS)}` (comma-separated)."]


def metrics() -> list[str]:
    rows = ["| name | type | labels | what it is | from | event log |", "|---|---|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(f"`{n}`" for n in m.labels) or "-"
        name = m.series()[0] if m.kind == "counter" else m.name
        tick = f"`{m.tick}`" if m.tick else "-"
        rows.append(f"| `{name}` | {m.kind} | {labels} | {m.help} | {m.source} | {tick} |")
    return rows


def alerts() -> list[str]:
    rows = ["| alert | fires when | for | severity |", "|---|---|---|---|"]
    for a in alert_rules(AlertSpec()):
        rows.append(f"| `{a.name}` | `{a.expr.replace('|', chr(92) + '|')}` | {a.for_} | {a.severity} |")
    return rows


def panels() -> list[str]:
    rows = ["| panel | queries |", "|---|---|"]
    for p in PANELS:
        rows.append(f"| {p.title} | {len(p.targets)} |")
    return rows


def export_formats() -> list[str]:
    rows = ["| `--format` | default file | one row holds | `--samples grouped` |", "|---|---|---|---|"]
    for f in FORMATS:
        rows.append(f"| `{f.name}` | `{f.default_name}` | {f.docs} | {'yes' if f.groupable else 'no'} |")
    return rows


TABLES: dict[str, tuple[Path, Callable[[], list[str]]]] = {
    "metrics": (ROOT / "docs" / "observability.md", metrics),
    "alerts": (ROOT / "docs" / "observability.md", alerts),
    "panels": (ROOT / "docs" / "observability.md", panels),
    "doctor-rules": (ROOT / "docs" / "observability.md", doctor_rules),
    "apis": (ROOT / "docs" / "compat.md", apis),
    "quality-signals": (ROOT / "docs" / "quality.md", quality_signals),
    "quality-selectors": (ROOT / "docs" / "quality.md", quality_selectors),
    "export-formats": (ROOT / "docs" / "quality.md", export_formats),
}


def render(text: str, name: str, rows: list[str]) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, found, rest = text.partition(start)
    if not found or end not in rest:
        raise SystemExit(f"no {start} ... {end} in the page")
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n" + "\n".join(rows) + f"\n{end}{tail}"


def main() -> int:
    stale = []
    for name, (page, table) in TABLES.items():
        text = page.read_text()
        new = render(text, name, table())
        if new == text:
            continue
        if "--check" in sys.argv[1:]:
            stale.append(f"{page.relative_to(ROOT)} ({name})")
        else:
            page.write_text(new)
    if stale:
        print(f"stale: {', '.join(stale)}: run `python scripts/gen_tables.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
