"""The test suite's own layout: every folder of test modules is a package, so each module is imported under its
dotted name (``tests.unit.run.test_dispatch``) and two test files of the same name in different folders never
clash (pytest's "import file mismatch" stops the whole run's collection otherwise); and what test modules share
lives in tests/helpers/, never imported out of another test module or a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_folder_of_test_modules_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    assert TESTS in folders
    missing = sorted(str(d.relative_to(TESTS.parent)) for d in folders if not (d / "__init__.py").exists())
    assert not missing, f"folders of test modules without __init__.py: {missing}"


ROOT = TESTS.parent
# A test of the conftest's own hook (the ordering of real-engine tests) imports the hook it tests.
CONFTEST_IMPORTS_ALLOWED = {("tests.unit.test_engine_order", "tests.conftest")}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (``from a import b`` counts ``a`` and ``a.b``)."""
    here = _module(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(here[: len(here) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    """Helpers shared between test modules live in tests/helpers/: importing a test module runs its module-level
    code again and ties one test file to another's internals; a conftest is pytest's to load."""
    sources = [p for d in ("tests", "bench", "chaos", "scripts") for p in (ROOT / d).rglob("*.py")]
    offences = sorted(
        f"{_module(p)} imports {name}"
        for p in sources
        if "__pycache__" not in p.parts
        for name in _imported(p)
        if _is_test_module(name) and name != _module(p) and (_module(p), name) not in CONFTEST_IMPORTS_ALLOWED
    )
    assert not offences, "move what these import into tests/helpers/:\n" + "\n".join(offences)


def test_every_module_of_the_suite_is_a_test_a_conftest_or_a_helper() -> None:
    """One home for what test modules share: tests/helpers/ (and tests/engines/, the servers the tests run)."""
    homes = {TESTS / "helpers", TESTS / "engines"}
    stray = sorted(
        str(p.relative_to(ROOT))
        for p in TESTS.rglob("*.py")
        if "__pycache__" not in p.parts
        and not (p.name.startswith("test_") or p.name in ("conftest.py", "__init__.py"))
        and not homes & set(p.parents)
    )
    assert not stray, f"helper modules outside tests/helpers/: {stray}"
