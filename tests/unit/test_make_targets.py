"""The Makefile's lanes: ``make check`` is the fast one (lint, types, the unit tests; no engine, no server
install), ``make test`` the whole suite with a one-line coverage figure."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def planned(target: str) -> str:
    res = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_check_is_lint_types_and_the_unit_tests_only() -> None:
    steps = planned("check")
    assert "ruff check" in steps and "ruff format --check" in steps and "mypy" in steps
    assert "pytest -q -p no:cacheprovider tests/unit" in steps
    for slow in ("build_tiny_model", "sglang", "engine-venv", "chromium", "--cov"):
        assert slow not in steps, slow


def test_test_prints_a_coverage_figure() -> None:
    steps = planned("test")
    assert "--cov=tokenmill --cov-report= tests" in steps
    assert "coverage report --format=total" in steps
