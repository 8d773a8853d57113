"""ARCHITECTURE.md lists every module with its docstring's first line; the docs' generated tables are current."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_architecture_module_list_is_current() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_architecture.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


def test_the_run_package_docstring_names_its_modules_and_no_others() -> None:
    import tokenmill.run

    named = set(re.findall(r"``(\w+)``", tokenmill.run.__doc__ or "")) - {"runner"}
    modules = {p.stem for p in (ROOT / "src" / "tokenmill" / "run").glob("*.py")} - {"__init__", "runner"}
    assert named == modules


def test_the_docs_tables_are_rendered_from_the_code_s_tables() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_tables.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
