"""Every module logs under its own name: ``logging.getLogger(__name__)``, so a log line says which module wrote it
and a level set on a package (``tokenmill.fleet``) reaches every module in it."""

from __future__ import annotations

import ast
import importlib
import logging
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
# a command that sets up a package's output (a handler and a level on the package's logger), not a module's logger
CONFIGURES_PACKAGE = {"tokenmill.cli.sim": {"tokenmill.sim"}}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted((SRC / "tokenmill").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((name, path))
    return out


def _get_logger_args(tree: ast.AST) -> list[ast.expr | None]:
    args: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger":
            args.append(node.args[0] if node.args else None)
    return args


def _misnamed(module: str, tree: ast.AST) -> list[str]:
    out = []
    for arg in _get_logger_args(tree):
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("tokenmill")):
            continue
        if arg.value not in CONFIGURES_PACKAGE.get(module, set()):
            out.append(f"{module} logs as {arg.value!r}")
        # no argument (the root), __name__, or a loop over third-party names to quieten: no tokenmill module named
    return out


def test_every_module_names_its_logger_after_itself() -> None:
    bad = [line for module, path in _modules() for line in _misnamed(module, ast.parse(path.read_text()))]
    assert not bad, "use logging.getLogger(__name__): " + "; ".join(bad)


def test_every_module_level_logger_carries_the_module_name() -> None:
    bad = []
    for module, _ in _modules():
        if module == "tokenmill.__main__":  # importing it runs the command line
            continue
        mod = importlib.import_module(module)
        for attr in ("log", "logger"):
            value = getattr(mod, attr, None)
            if isinstance(value, logging.Logger) and value.name != module:
                bad.append(f"{module}.{attr} is named {value.name!r}")
    assert not bad, "; ".join(bad)


def test_the_scan_sees_a_logger_named_after_another_module() -> None:
    bad = ast.parse('import logging\nlog = logging.getLogger("tokenmill.fleet")\n')
    assert _misnamed("tokenmill.fleet.endpoints", bad) == ["tokenmill.fleet.endpoints logs as 'tokenmill.fleet'"]
    assert _misnamed("tokenmill.cli.sim", ast.parse('logging.getLogger("tokenmill.sim")')) == []
