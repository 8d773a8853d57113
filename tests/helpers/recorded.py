"""What real SGLang servers exposed under a known load (tests/fixtures/sglang-0.5.23/, written by
scripts/record_sglang_fixtures.py): /metrics, /server_info and log lines, with the load in meta.json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.23"
META: dict[str, Any] = json.loads((DIR / "meta.json").read_text())


def metrics(name: str) -> str:
    return (DIR / f"metrics-{name}.txt").read_text()


def server_info(name: str) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((DIR / f"server_info-{name}.json").read_text())
    return info


def log_lines(name: str) -> list[str]:
    return (DIR / f"log-{name}.txt").read_text().splitlines()


def recording(name: str) -> dict[str, Any]:
    """The load and what the server held when /metrics was read."""
    rec: dict[str, Any] = META["recordings"][name]
    return rec


_SCHEDULER_SAMPLE = re.compile(r'^(sglang:[a-z_]+)\{(.*tp_rank="0".*)\} (\S+)$')


def as_ranks(text: str, ranks: int, label: str = "dp_rank") -> str:
    """``text`` as a server with ``ranks`` schedulers would expose it: every scheduler sample once per rank,
    ``label`` set to the rank, with the same value (request counters are the tokenizer's, once). ``dp_rank``:
    data-parallel schedulers; ``tp_rank``: the ranks of one tensor-parallel group, each reporting the same
    scheduler (``--enable-metrics-for-all-schedulers``)."""
    out: list[str] = []
    for line in text.splitlines():
        m = _SCHEDULER_SAMPLE.match(line)
        if m is None:
            out.append(line)
            continue
        name, labels, value = m.groups()
        own = re.compile(label + r'="[^"]*"')
        for r in range(ranks):
            rank = f'{label}="{r}"'
            labelled = own.sub(rank, labels) if own.search(labels) else f"{rank},{labels}"
            out.append(f"{name}{{{labelled}}} {value}")
    return "\n".join(out) + "\n"
