"""`tokenmill demo` (what `make demo` runs), on a slice of the bundled sample."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.conftest import run_cli


def test_demo_completes_and_names_the_binding_resource(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = run_cli("demo", "--servers", "2", "--limit", "300", "-o", str(out), "--no-live", timeout=240)
    assert res.returncode == 0, res.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["finished"] and summary["completed_total"] == 300
    assert "doctor" in res.stdout or "binding resource" in res.stdout  # the summary carries the diagnosis
    assert run_cli("verify", str(out)).returncode == 0
    # a second demo starts over instead of finding everything done
    again = run_cli("demo", "--servers", "1", "--limit", "20", "-o", str(out), "--no-live", timeout=240)
    assert again.returncode == 0, again.stderr
    assert orjson.loads((out / "summary.json").read_bytes())["completed_total"] == 20
