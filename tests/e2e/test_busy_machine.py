"""The timing-sensitive twin tests on a busy machine: the twin's load conformance (its counts come from its own
virtual clock, not the wall clock), run beside two processes that keep both cores busy (``python -c 'while True:
pass'``), started and killed by this test.

The selection is small on purpose (about two minutes): the twin's KV-pressure case, separate concurrent requests
sharing a new prefix, a burst past the running cap. Not yet in it: tests/e2e/test_observe.py (its ``status`` check
races the end of a 600-answer run) and the autotune run of tests/e2e/test_autotune.py (its steady part after the
roll-out comes out shorter than it asks); both still fail beside two hogs.

It runs in ``make busy-check``, not in ``make test``: beside the hogs it passed 2 of its last 3 runs (the failure
is not understood yet), and a check that fails one run in three would fail the suite for a reason it names.
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
