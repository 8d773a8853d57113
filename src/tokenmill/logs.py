"""Logging set-up for a command or a partition's client: stderr (through rich on a terminal) and the run's log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler


def setup_logging(level: str = "INFO", log_file: Path | None = None, console: Console | None = None) -> None:
    """Log to stderr (through rich on a terminal) and, when given, to a file in the output directory."""
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(level.upper())
    con = console or Console(stderr=True)
    if con.is_terminal:
        handler: logging.Handler = RichHandler(console=con, show_path=False, rich_tracebacks=False)
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            fh = _LogFile(log_file)
        except OSError:
            return
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(fh)
    for noisy in ("aiohttp", "asyncio", "datasets", "fsspec", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _LogFile(logging.FileHandler):
    """The run's log file: a write that fails (disk full, ...) says so once on stderr and stops writing it,
    instead of a traceback for every record (the run reports the disk itself where it matters)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def flush(self) -> None:
        if not self.broken:
            super().flush()

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self.broken = True
        sys.stderr.write(
            f"cannot write the log file {self.baseFilename} ({exc.strerror or exc}); the run goes on without it\n"
        )
