"""The layering ARCHITECTURE.md draws, kept by the code's own imports: every import counts (module level, inside
functions, under TYPE_CHECKING), so a cycle cannot hide behind a late import.

Package tiers, bottom up (a package imports only from tiers below it, or from the packages listed before it in its
own tier):

    foundations   errors, config, records, fmt, logs, fsio, histogram (and the package root)
    inputs/outputs sources, backends, output, storage, planner
    watching      sim, monitor, quality
    diagnosis     doctor, and the servers the run drives: fleet
    tuning        autotune
    the run       run
    around it     report, export, observe
    commands      cli, __main__
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
TIERS: tuple[tuple[str, ...], ...] = (
    ("tokenmill", "errors", "config", "records", "fmt", "logs", "fsio", "histogram"),
    ("sources", "backends", "output", "storage", "planner"),
    ("sim", "monitor", "quality"),
    ("doctor", "fleet"),
    ("autotune",),
    ("run",),
    ("report", "export", "observe"),
    ("cli", "__main__"),
)
RANK = {unit: (tier, pos) for tier, units in enumerate(TIERS) for pos, unit in enumerate(units)}
# third-party packages that only one part of the house may import
ONLY_IN = {
    "fsspec": ("tokenmill.storage.store",),
    "s3fs": ("tokenmill.storage.store",),
    "click": ("tokenmill.cli",),
    "aiohttp": (
        "tokenmill.backends",  # the request path and its session
        "tokenmill.monitor",  # scrapes
        "tokenmill.sim",  # the simulated server
        "tokenmill.run.prometheus",  # the --metrics-port server
        "tokenmill.run.dispatch",  # the session's type, for the probe's signature
    ),
}


def modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = modules()


def imports(path: Path) -> Iterator[str]:
    """Every module an import statement of ``path`` names (a ``from pkg import sub`` names ``pkg.sub``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
            yield from subs or [node.module]


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def graph() -> dict[str, set[str]]:
    return {m: {t for t in imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_at_all() -> None:
    assert cycles(graph()) == []


def test_packages_import_only_downwards() -> None:
    wrong = []
    for module, targets in graph().items():
        here = RANK[unit(module)]
        for target in targets:
            there = RANK[unit(target)]
            if unit(target) != unit(module) and there >= here:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


@pytest.mark.parametrize("package", sorted(ONLY_IN))
def test_third_party_boundaries(package: str) -> None:
    allowed = ONLY_IN[package]
    users = [
        m
        for m, p in MODULES.items()
        if any(t == package or t.startswith(package + ".") for t in imports(p))
        and not any(m == a or m.startswith(a + ".") for a in allowed)
    ]
    assert users == []


def test_the_layering_test_sees_a_cycle_when_there_is_one() -> None:
    g = {"tokenmill.a": {"tokenmill.b"}, "tokenmill.b": {"tokenmill.a"}, "tokenmill.c": set()}
    assert cycles(g) == [["tokenmill.a", "tokenmill.b"]]


def test_plan_and_report_do_not_load_the_request_path() -> None:
    """``tokenmill plan`` and ``tokenmill report`` print durations without loading the dispatcher or aiohttp."""
    probe = (
        "import sys, tokenmill.planner.render, tokenmill.report.html, tokenmill.cli.plan, tokenmill.cli.report; "
        "print(sorted(m for m in ('tokenmill.run.dispatch', 'aiohttp') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_public_names_resolve_and_stay_sorted() -> None:
    import tokenmill

    exported = [n for n in tokenmill.__all__ if n != "__version__"]
    assert exported == sorted(exported)
    for name in exported:
        assert getattr(tokenmill, name) is not None, name
    with pytest.raises(AttributeError):
        _ = tokenmill.no_such_name  # type: ignore[attr-defined]
