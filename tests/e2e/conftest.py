"""Whole-CLI runs against simulated servers started as real processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenmill.fleet.simprocs import SimProcess, sim_fleet


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[SimProcess]]:
    """Simulated servers; parametrise with ``@pytest.mark.parametrize('fleet', [(n, [args])], indirect=True)``."""
    n, args = getattr(request, "param", (2, []))
    with sim_fleet(n, ["--time-scale", "0.05", *args], log_dir=tmp_path) as procs:
        yield procs
