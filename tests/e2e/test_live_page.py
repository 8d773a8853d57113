"""The live page in a real browser: a run's metrics port serves ``/``, headless Chromium renders it, it shows the
servers and the ETA and updates itself; ``tokenmill serve`` shows the same page for the finished run and for a
whole split job at its prefix. The live page's screenshot is written to build/screenshots/live-page.png.

Chromium is a Debian package that `make system-deps` installs; skipped where it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from PIL import Image

from tests.helpers.cli import FAST_MONITOR, TOKENMILL, start_run, stop_run, write_job
from tests.helpers.images import colored_share
from tests.helpers.waiting import wait_for, wait_for_match
from tokenmill.fleet.simprocs import SimProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "build" / "screenshots" / "live-page.png"
WIDTH, HEIGHT = 1280, 2400
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium (`make system-deps` installs it)"
)


def chromium(url: str, profile: Path, *args: str, budget_ms: int = 8000) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``url`` with ``budget_ms`` of virtual time (its timers run without waiting)."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={profile}",
         "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}", f"--virtual-time-budget={budget_ms}", *args, url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "state.json", timeout=10) as resp:
        return dict(json.loads(resp.read()))


def long_job(tmp_path: Path, servers: list[str]) -> tuple[Path, Path]:
    data = tmp_path / "in.jsonl"
    with data.open("wb") as f:
        for i in range(20_000):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": f"Write a line about the number {i}."}) + b"\n")
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", servers, data, out, concurrency=8, monitor=FAST_MONITOR,
                    output={"dir": str(out), "shard_size": 200})  # fmt: skip
    return job, out


@pytest.mark.parametrize("fleet", [(2, ["--output-len-mean", "64", "--loop-rate", "0.2"])], indirect=True)
def test_the_live_page_renders_shows_the_servers_and_the_eta_and_updates(
    fleet: list[SimProcess], tmp_path: Path
) -> None:
    job, out = long_job(tmp_path, [s.url for s in fleet])
    run = start_run(job, "--metrics-port", "0")
    try:
        log = out / "tokenmill.log"
        page = wait_for_match("the live page's URL in the log", log, r"the run's live page at (\S+)", 90,
                              alive=run).group(1)  # fmt: skip
        html = urllib.request.urlopen(page, timeout=10).read().decode()
        assert "<script>" in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing external
        first = wait_for("an ETA and answers in the page's state", lambda: state(page), 60, 0.2,
                         done=lambda s: s["progress"] and s["progress"]["eta_s"] and s["samples"]["worst"],
                         alive=run)  # fmt: skip
        dom = chromium(page + "?every=1", tmp_path / "profile", "--dump-dom", budget_ms=10_000)
        assert dom.returncode == 0, dom.stderr[-2000:]
        for s in fleet:
            assert f'<tr data-url="{s.url}">' in dom.stdout, dom.stdout[-3000:]
        updated = re.search(r'data-updates="(\d+)"', dom.stdout)
        assert updated, dom.stdout[-3000:]
        updates = int(updated.group(1))
        assert updates >= 2, "the page did not poll its state again"
        shown = re.search(r'id="eta">([^<]+)<', dom.stdout)
        assert shown, dom.stdout[-3000:]
        eta = shown.group(1)
        assert re.fullmatch(r"(\d+d)?(\d+h)?\d+m\d*s?", eta), eta
        assert 'class="series"' in dom.stdout  # the throughput and ETA plots have lines
        assert 'id="recent"' in dom.stdout  # the sample viewer shows answers, and the worst loops
        assert '<table class="worst" data-signal="repetition">' in dom.stdout
        later = wait_for("the run to move on", lambda: state(page), 60, 0.2, alive=run,
                         done=lambda s: s["progress"]["done"] > first["progress"]["done"])  # fmt: skip
        assert len(later["history"]["t"]) >= len(first["history"]["t"])
        SHOT.parent.mkdir(parents=True, exist_ok=True)
        shot = chromium(page, tmp_path / "profile2", f"--screenshot={SHOT}")
        assert shot.returncode == 0, shot.stderr[-2000:]
    finally:
        stop_run(run)
    img = Image.open(SHOT)
    assert img.size == (WIDTH, HEIGHT)
    assert colored_share(img, (0, 0, WIDTH, 700)) > 0.005  # plots, bars and the progress bar drew


def serve(target: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([*TOKENMILL, "serve", target, "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # its first line names the URL (or it has failed: the assertion shows stderr)
    found = re.search(r"at (http://\S+/) \(Ctrl-C", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"tokenmill serve did not start: {line!r} {proc.communicate()[1][-2000:]}")
    return proc, found.group(1)


def stop_serve(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("fleet", [(2, ["--output-len-mean", "32"])], indirect=True)
def test_serve_shows_a_finished_split_job_from_its_prefix(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    with data.open("wb") as f:
        for i in range(300):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": f"Write a line about the number {i}."}) + b"\n")
    out, remote = tmp_path / "out", (tmp_path / "remote").as_uri()
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, concurrency=8, monitor=FAST_MONITOR,
                    output={"dir": str(out), "shard_size": 50, "remote": remote})  # fmt: skip
    for part in ("0/2", "1/2"):
        done = subprocess.run([*TOKENMILL, "run", str(job), "--no-live", "--partition", part], capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    proc, url = serve(remote)
    try:
        st = state(url)
        assert st["state"] == "finished" and st["progress"]["done"] == 300
        assert [p["name"] for p in st["partitions"]] == ["p000", "p001"]
        assert {p["state"] for p in st["partitions"]} == {"finished"}
        assert {s["url"] for s in st["servers"]} == {s.url for s in fleet}
        st = wait_for("the sample viewer's pass over the corpus", lambda: state(url), 60, 0.2,
                      done=lambda s: s["samples"]["recent"], alive=proc)  # fmt: skip
        assert len(st["samples"]["recent"]) == 8 and all("flags" in e for e in st["samples"]["recent"])
        dom = chromium(url, tmp_path / "profile", "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert '<span id="state" class="badge finished">finished</span>' in dom.stdout
        assert dom.stdout.count('<tr data-url="http://') == 2 and "<td>p001</td>" in dom.stdout
        assert re.search(r'id="done">300 / 300<', dom.stdout), dom.stdout[-3000:]
    finally:
        stop_serve(proc)
    proc, url = serve(str(out), "--no-samples")
    try:
        local = state(url)
        assert local["progress"]["done"] == 300 and len(local["partitions"]) == 2 and local["samples"]["recent"] == []
    finally:
        stop_serve(proc)


def test_serve_refuses_a_directory_without_an_event_log(tmp_path: Path) -> None:
    res = subprocess.run([*TOKENMILL, "serve", str(tmp_path), "--port", "0"], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert res.returncode == 2 and "holds no event log (events.jsonl)" in res.stderr, res.stderr
