"""Write errors (disk full, permissions, read-only mount) become clear OutputErrors and corrupt nothing."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from tests.helpers import factories
from tokenmill.errors import OutputError
from tokenmill.output import OutputDir, verify
from tokenmill.records import Completion, Failure


def completion(i: int) -> Completion:
    return factories.completion(f"p{i}", completion="z" * 40)


def failure(i: int) -> Failure:
    return factories.failure(f"p{i}", error_type="E", error="e", http_status=None, server=None, finished_at=0)


class FullDisk:
    """``os.write`` for files under ``root`` with ``budget`` bytes of room left; short writes, then ENOSPC."""

    def __init__(self, root: Path, budget: int, code: int = errno.ENOSPC) -> None:
        self.root = str(root)
        self.budget = budget
        self.code = code
        self.real = os.write
        self.hit = False

    def __call__(self, fd: int, data: bytes) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(self.root) or target.endswith(".lock"):
            return self.real(fd, data)
        if self.budget <= 0:
            self.hit = True
            raise OSError(self.code, os.strerror(self.code))
        n = self.real(fd, bytes(data[: self.budget]))
        self.budget -= n
        return n


def record(out: OutputDir, i: int) -> None:
    if i % 7 == 3:
        out.fail(failure(i))
    else:
        out.write(completion(i))


def run(out: OutputDir, ids: range) -> None:
    for i in ids:
        record(out, i)
        if i % 3 == 0:
            out.flush()


def test_disk_full_is_a_clear_error_and_the_rerun_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = FullDisk(tmp_path, budget=1500)
    monkeypatch.setattr(os, "write", disk)
    out = OutputDir(tmp_path, shard_size=4)
    out.open()
    with pytest.raises(OutputError) as err:
        run(out, range(40))
    assert disk.hit
    assert str(err.value).startswith(f"disk full while writing {tmp_path}/")
    assert str(err.value).endswith("free space and rerun the same command; nothing is lost")
    with pytest.raises(OutputError, match="disk full"):  # no write goes past the failure
        out.write(completion(99))
    out.close(seal=True)  # does not raise again, releases the lock
    monkeypatch.undo()

    again = OutputDir(tmp_path, shard_size=4)
    state = again.open()
    assert not any("torn" in msg for msg in state.repaired)  # the short write was cut back at once
    todo = [i for i in range(40) if f"p{i}" not in state.done]
    for i in todo:
        record(again, i)
    again.close(seal=True)
    assert verify(tmp_path, [f"p{i}" for i in range(40)]).ok


def test_a_short_write_that_cannot_be_cut_back_is_repaired_on_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "write", FullDisk(tmp_path, budget=100))

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "ftruncate", no_truncate)
    out = OutputDir(tmp_path, shard_size=10)
    out.open()
    with pytest.raises(OutputError, match="disk full"):
        run(out, range(10))
    out.close(seal=False)
    monkeypatch.undo()

    state = OutputDir(tmp_path, shard_size=10).open()
    assert len(state.repaired) == 1
    assert state.repaired[0].startswith("cut a torn last line (")
    assert state.repaired[0].endswith("bytes) from completions_000000.jsonl.open")


@pytest.mark.parametrize("seed", range(25))
def test_disk_full_anywhere_leaves_a_directory_that_resumes_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    disk = FullDisk(tmp_path, budget=rng.randint(0, 6000))
    monkeypatch.setattr(os, "write", disk)
    out = OutputDir(tmp_path, shard_size=rng.randint(1, 6))
    out.open()
    try:
        run(out, range(60))
        out.close(seal=True)
    except OutputError as exc:
        assert "disk full" in str(exc)
        out.close(seal=True)
    monkeypatch.undo()

    again = OutputDir(tmp_path, shard_size=3)
    state = again.open()
    for i in range(60):
        if f"p{i}" not in state.done:
            record(again, i)
    again.close(seal=True)
    report = verify(tmp_path, [f"p{i}" for i in range(60)])
    assert report.ok, report.render()


@pytest.mark.parametrize(
    ("code", "phrase"),
    [
        (errno.EROFS, "read-only file system while writing"),
        (errno.EACCES, "permission denied while writing"),
        (errno.EDQUOT, "disk quota exceeded while writing"),
        (errno.EIO, "I/O error while writing"),
    ],
)
def test_write_errors_name_the_file_and_the_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, phrase: str
) -> None:
    monkeypatch.setattr(os, "write", FullDisk(tmp_path, budget=0, code=code))
    out = OutputDir(tmp_path, shard_size=2)
    out.open()
    with pytest.raises(OutputError, match=phrase) as err:
        run(out, range(4))
    assert "completions_000000.jsonl.open" in str(err.value)
    assert "rerun" in str(err.value)
    out.close(seal=True)


def test_permission_denied_on_open_is_an_output_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def guarded(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    with pytest.raises(OutputError, match=r"permission denied while locking .*\.lock: make the output"):
        OutputDir(tmp_path).open()
