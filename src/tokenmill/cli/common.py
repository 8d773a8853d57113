"""Shared pieces of the commands: logging set-up and running a coroutine with clean error reporting."""

from __future__ import annotations

import logging
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
            fh = logging.FileHandler(log_file)
        except OSError:
            return
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(fh)
    for noisy in ("aiohttp", "asyncio", "datasets", "fsspec", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
