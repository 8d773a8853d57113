"""The test suite's own layout: every folder of test modules is a package, so each module is imported under its
dotted name (``tests.unit.run.test_dispatch``) and two test files of the same name in different folders never
clash (pytest's "import file mismatch" stops the whole run's collection otherwise)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_folder_of_test_modules_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    assert TESTS in folders
    missing = sorted(str(d.relative_to(TESTS.parent)) for d in folders if not (d / "__init__.py").exists())
    assert not missing, f"folders of test modules without __init__.py: {missing}"
