"""The run report renders in a real browser: headless Chromium screenshots it and the figures show.

Chromium is a Debian package that `make system-deps` (a dependency of `make test`) installs; this test
installs nothing itself and is skipped where the browser is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest
from PIL import Image

from tests.helpers.events import write_events
from tests.helpers.images import colored_share
from tokenmill.report import build_report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1200, 5200

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium (`make system-deps` installs it)"
)


def screenshot(page: Path, shot: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out")
    page = build_report(out)
    shot = tmp_path / "report.png"
    res = screenshot(page, shot, tmp_path / "profile")
    assert res.returncode == 0, res.stderr[-2000:]
    img = Image.open(shot)
    assert img.size == (WIDTH, HEIGHT)
    top = colored_share(img, (0, 0, WIDTH, 700))  # the title, summary and verdict tables
    figures = colored_share(img, (0, 900, WIDTH, HEIGHT))  # the plots below them
    assert top < 0.05  # text and tables, mostly monochrome
    assert figures > 0.003, f"no plotted lines or bars rendered ({figures:.4f} coloured)"
    gray = img.convert("L")
    darkest, _ = cast(tuple[int, int], gray.getextrema())  # a one-band image's (min, max)
    assert darkest < 80  # there is dark text on the page
