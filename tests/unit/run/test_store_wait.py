"""What a run says while its store does not answer at the start (:class:`tokenmill.run.remote.StoreWait`): a first
try slower than ``upload.start_notice_s`` is said at once, then each failed try, in the log and the writer lock."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tokenmill.config import OutputSpec
from tokenmill.errors import StoreUnavailable
from tokenmill.output import OutputDir
from tokenmill.output.holder import read_holder
from tokenmill.run.remote import StoreWait


def test_a_slow_first_try_then_a_failure_are_said_and_noted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = OutputDir(tmp_path / "out", shard_size=10)
    out.lock()
    try:
        wait = StoreWait(out, OutputSpec(dir=str(tmp_path / "out"), remote="s3://bkt/run/"))
        with caplog.at_level(logging.WARNING):
            wait.slow()
        assert (
            "the store at s3://bkt/run/: no answer yet after 3 s (still trying): retrying every 1-60 s" in caplog.text
        )
        holder = read_holder(tmp_path / "out" / ".lock")
        assert holder is not None and holder.phase == "starting" and holder.waiting is not None
        assert holder.waiting["error"] == "no answer yet after 3 s" and holder.waiting["tries"] == 0
        wait.failed(StoreUnavailable("read s3://bkt/run/_tokenmill_manifest.json failed: connection refused"), 1.0)
        wait.slow()  # a try has failed: nothing more to say about slowness
        assert caplog.text.count("no answer yet") == 1
        holder = read_holder(tmp_path / "out" / ".lock")
        assert holder is not None and holder.waiting is not None and holder.waiting["tries"] == 1
        assert "connection refused" in str(holder.waiting["error"])
    finally:
        out.close(seal=False)
