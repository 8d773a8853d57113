"""No definition nobody names: every function, method and class of the package is named somewhere else in the
repository (its code, tests, benchmarks, chaos, scripts or docs) besides its own definition.

A name that occurs once is its definition alone: dead code, which misleads a reader (a ``_SUCCESS`` writer that
writes other fields than the one in use) and hides from coverage. Decorated definitions (click commands, pydantic
validators) and the few a framework calls by name are not counted.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("src", "tests", "bench", "chaos", "scripts", "engines")
# called by a framework, never by name in this repository
FRAMEWORK = {
    "list_commands": "click.Group calls it",
    "get_command": "click.Group calls it",
    "OpenAIChat": "a Backend registers itself by subclassing",
    "OpenAICompletions": "a Backend registers itself by subclassing",
    "SGLangGenerate": "a Backend registers itself by subclassing",
}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names(root: Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    pages = [*root.glob("*.md"), *(root / "docs").rglob("*.md"), *root.glob("Makefile"), *root.glob("pyproject.toml")]
    for path in [*(p for d in CODE for p in (root / d).rglob("*.py")), *pages]:
        seen.update(_WORD.findall(path.read_text(errors="replace")))
    return seen


def _undecorated(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return all(isinstance(d, ast.Name) and d.id in ("property", "staticmethod", "classmethod") for d in decorators)


def dead_definitions(root: Path = ROOT) -> list[str]:
    seen = _names(root)
    dead = []
    for path in sorted((root / "src" / "tokenmill").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            name = node.name
            if name.startswith("__") or name in FRAMEWORK or not _undecorated(node):
                continue
            if seen[name] <= 1:
                dead.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return dead


def test_no_definition_is_dead() -> None:
    dead = dead_definitions()
    assert not dead, f"definitions nobody names (delete them, or use them): {dead}"


def test_the_scan_finds_a_dead_definition(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "tokenmill"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(
        "def used():\n    pass\n\n\nclass Box:\n    @property\n    def unread(self):\n        return 1\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from tokenmill.a import used\n")
    assert dead_definitions(tmp_path) == ["src/tokenmill/a.py:5 Box", "src/tokenmill/a.py:7 unread"]
