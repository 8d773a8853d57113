"""ARCHITECTURE.md lists every module with its docstring's first line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_architecture_module_list_is_current() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_architecture.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
