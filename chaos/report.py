"""The outcome of a chaos run: what was injected and survived, every client start, every check; printed as
rich tables and written as JSON."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from chaos.checks import Check
from chaos.client import Start
from chaos.faults import KINDS, Tally


@dataclass(slots=True)
class ChaosReport:
    """Everything a chaos run found (``ok`` when every check passed)."""

    seed: int
    quick: bool
    workdir: Path
    config: dict[str, Any]
    plan: list[dict[str, Any]] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    starts: list[Start] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    json_path: Path | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def kills(self) -> int:
        return sum(1 for s in self.starts if s.ended == "SIGKILL")

    def to_dict(self) -> dict[str, Any]:
        injected = [
            {
                "kind": kind,
                "what": what,
                "where": where,
                "injected": self.tally.counts.get(kind, 0),
                "skipped": self.tally.skipped.get(kind),
                "details": self.tally.details.get(kind, []),
            }
            for kind, (what, where) in KINDS.items()
        ]
        return {
            "ok": self.ok,
            "seed": self.seed,
            "quick": self.quick,
            "workdir": str(self.workdir),
            "config": self.config,
            "timings_s": self.timings,
            "requests": self.requests,
            "injected": injected,
            "fault_problems": self.tally.problems,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
            "starts": [s.to_dict() for s in self.starts],
            "plan": self.plan,
            "notes": self.notes,
        }

    def write_json(self, path: Path) -> None:
        """Write the JSON summary atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2, default=str))
        os.replace(tmp, path)
        self.json_path = path

    def render(self, console: Console) -> None:
        """The summary: injected faults, client starts, checks, verdict."""
        faults = Table(title=f"chaos run (seed {self.seed}{', quick' if self.quick else ''}): injected and survived")
        for col, justify in (("fault", "left"), ("injected by", "left"), ("count", "right"), ("outcome", "left")):
            faults.add_column(col, justify=justify)  # type: ignore[arg-type]
        survived = self.ok
        for kind, (what, where) in KINDS.items():
            n = self.tally.counts.get(kind, 0)
            skipped = self.tally.skipped.get(kind)
            if skipped:
                outcome = f"[yellow]skipped[/]: {skipped}"
            elif n == 0:
                outcome = "[red]not injected[/]"
            else:
                outcome = "[green]survived[/]" if survived else "[red]see checks[/]"
                extra = self.tally.details.get(kind, [])
                if extra and kind in ("disk-full", "store-outage", "fleet-sigkill"):
                    outcome += f" ({extra[0][:90]})"
            faults.add_row(what, where, f"{n:.0f}", outcome)
        console.print(faults)
        console.print(self._starts_table())
        checks = Table(title="checks")
        checks.add_column("check")
        checks.add_column("ok")
        checks.add_column("detail", overflow="fold")
        for c in self.checks:
            checks.add_row(c.name, "[green]yes[/]" if c.ok else "[red]NO[/]", c.detail)
        console.print(checks)
        for note in self.notes:
            console.print(f"note: {note}")
        took = ", ".join(f"{k} {v:.0f} s" for k, v in self.timings.items())
        console.print(f"seed {self.seed}; {took}; work directory {self.workdir}")
        if self.json_path is not None:
            console.print(f"JSON summary: {self.json_path}")
        verdict = "[bold green]CHAOS RUN PASSED[/]" if self.ok else "[bold red]CHAOS RUN FAILED[/]"
        console.print(verdict)

    def _starts_table(self) -> Table:
        table = Table(title="client starts")
        table.add_column("ended")
        table.add_column("starts", justify="right")
        table.add_column("made progress", justify="right")
        table.add_column("median life", justify="right")
        table.add_column("records gained", justify="right")
        groups: dict[str, list[Start]] = {}
        for s in self.starts:
            key = s.ended if s.killed else f"{s.ended}: {s.message or '(finished)'}"[:80]
            groups.setdefault(key, []).append(s)
        for key, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lives = sorted(s.lived_s for s in group)
            table.add_row(
                key,
                str(len(group)),
                str(sum(1 for s in group if s.progress > 0)),
                f"{lives[len(lives) // 2]:.1f} s",
                str(sum(s.progress for s in group)),
            )
        return table
