"""Upload health live: while the store is down, ``tokenmill status`` shows the shards waiting, the oldest's age
and the store's error, the doctor says uploads are behind, and past ``output.upload.max_backlog`` the run pauses
generation (saying why) until the store is back and the backlog drains; then it finishes with every shard up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tests.helpers.s3server import S3, TEST_ENV
from tests.helpers.waiting import wait_for
from tokenmill.fleet.simprocs import SimProcess

PREFIX = "corpora/health/run-1/"
FAST_MONITOR = {"scrape_interval_s": 0.2, "event_interval_s": 0.2, "rate_window_s": 1.0}


def status(out: Path) -> str:
    res = run_cli("status", str(out), env=TEST_ENV)
    return res.stdout if res.returncode == 0 else ""


def test_status_shows_the_upload_backlog_while_the_store_is_down_and_the_run_pauses_past_max_backlog(
    fleet: list[SimProcess], own_s3: S3, tmp_path: Path
) -> None:
    n = 400  # 8 shards of 50: more than the backlog lets the run seal while the store is down
    data = write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    upload = {"backoff_base_s": 0.05, "backoff_max_s": 0.5, "drain_timeout_s": 60, "start_wait_s": 1, "max_backlog": 2}
    output = {"shard_size": 50, "remote": own_s3.url(PREFIX), "storage_options": own_s3.options(), "upload": upload}
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, output=output, monitor=FAST_MONITOR)
    own_s3.stop()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenmill", "run", str(job), "--no-live"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **TEST_ENV},
    )
    try:
        shown = wait_for(
            "status to show the run paused for its upload backlog",
            lambda: text if "| generation paused |" in (text := status(out)) and "store error" in text else "",
            timeout=120,
        )
        waiting = re.search(r"\| upload backlog \| upload: (\d+) shard\(s\) waiting", shown)
        assert waiting and int(waiting.group(1)) > 2, shown  # past the backlog (requests in flight seal more)
        assert "oldest " in shown and "past output.upload.max_backlog (2 shards)" in shown
        assert proc.poll() is None  # paused, not ended
        wait_for("the doctor's uploads-behind verdict", lambda: "uploads behind" in status(out), timeout=60)
        done_while_paused = len(read_records(out)[0])
        assert done_while_paused < n
        own_s3.restart()
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert re.search(r"generation paused: \d+ shard\(s\)", err) and "generation resumes" in err
    assert "upload: all 8 shards are at s3://" in err
    done, failed = read_records(out)
    assert not failed and len(done) == n
    final = status(out)
    assert "| upload backlog |" not in final and "| generation paused |" not in final
