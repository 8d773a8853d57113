"""The timing-sensitive tests on a busy machine: the twin's load conformance (its counts come from its own virtual
clock, not the wall clock) and the e2e runs that watch a run while it goes on, run beside two processes that keep
both cores busy (``python -c 'while True: pass'``), started and killed by this test.

The selection is small on purpose (3-4 minutes): the twin's KV-pressure case, separate concurrent requests
sharing a new prefix (a burst the twin receives in one window however busy the host: :mod:`tokenmill.sim.receive`),
a burst past the running cap; a watched run's live `status` and `doctor` (tests/e2e/test_observe.py) and the
autotune run whose steady part after the roll-out is measured (tests/e2e/test_autotune.py).

It runs in ``make busy-check``, not in ``make test``: it takes minutes and keeps both cores busy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.process import tail

ROOT = Path(__file__).resolve().parents[2]
HOGS = 2
BUSY_TESTS = (
    "tests/conformance/test_load.py::test_kv_pressure_without_ignore_eos_admits_on_the_ratio_and_retracts"
    "[twin-of-sglang-dense-kv2048-x10]",
    "tests/conformance/test_load.py::test_separate_concurrent_requests_sharing_a_new_prefix_are_prefilled_together"
    "[twin-dense]",
    "tests/conformance/test_load.py::test_a_queue_forms_behind_max_running_requests[twin-of-sglang-dense-flagged-x10]",
    "tests/e2e/test_observe.py::test_a_watched_run_from_start_to_report",
    "tests/e2e/test_autotune.py::test_run_with_autotune_keeps_the_radix_off_change_and_every_server_gets_its_rate",
)
DEADLINE_S = 900


@pytest.mark.skipif(not os.environ.get("TOKENMILL_BUSY_CHECK"), reason="run by make busy-check")
def test_the_timing_tests_pass_with_both_cores_busy() -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *BUSY_TESTS],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, f"beside {HOGS} CPU hogs:\n{tail(done.stdout + done.stderr)}"
