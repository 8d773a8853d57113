"""A full disk stops the run cleanly with a clear message; after space is freed the rerun completes exactly once."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import SimProcess

DISK_KB = 2048  # the 600 records (about 1 KB each with their quality, origin and sampling) fit once it is freed
ROOM_KB = 200


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_KB}k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("fleet", [(2, ["--output-len-mean", "300"])], indirect=True)
def test_disk_full_stops_cleanly_then_resumes(fleet: list[SimProcess], small_disk: Path, tmp_path: Path) -> None:
    filler = small_disk / "filler.bin"
    filler.write_bytes(b"\0" * ((DISK_KB - ROOM_KB) << 10))  # room for some records, not for all
    data = write_prompts(tmp_path / "in.jsonl", 600)
    out = small_disk / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out, output={"shard_size": 100})
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "disk full" in res.stderr.lower() or "no space" in res.stderr.lower(), res.stderr
    assert "rerun" in res.stderr.lower() and "Traceback" not in res.stderr
    before, _ = read_records(out)
    assert 0 < len(before) < 600
    filler.unlink()  # free the space
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, failed = read_records(out)
    assert not failed
    assert Counter(r["id"] for r in done) == Counter(f"p{i:05d}" for i in range(600))
    assert run_cli("verify", str(out), "--input", str(job)).returncode == 0
