"""The run's log file (``OUT/tokenmill.log``) on a full disk: one line saying so, never a traceback.

Regression: the standard file handler printed "--- Logging error ---" and a traceback to stderr for every
record it could not write, so a run stopping cleanly on a full disk still showed tracebacks.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenmill.logs import setup_logging


class FullDisk:
    """A stream whose writes fail as on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        return None


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_a_full_disk_under_the_log_file_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_file = tmp_path / "out" / "tokenmill.log"
    setup_logging("INFO", log_file)
    log = logging.getLogger("tokenmill.test")
    log.warning("written to the file")
    file_handler = next(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler))
    file_handler.flush()
    assert "written to the file" in log_file.read_text()
    file_handler.stream = FullDisk()  # type: ignore[assignment]
    for i in range(3):
        log.warning("record %d after the disk filled up", i)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err
    assert err.count(f"cannot write the log file {log_file}") == 1
    assert "No space left on device" in err
    assert "record 2 after the disk filled up" in err  # stderr logging goes on
