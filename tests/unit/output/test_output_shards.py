"""The shard writer: sealing, the manifest, resume cycles, duplicates, failures, skips, the writer lock."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import orjson
import pytest

from tests.helpers import factories
from tokenmill.errors import ConfigError, OutputError
from tokenmill.output import OutputDir, SealedShard, verify
from tokenmill.records import Completion, Failure, Skip


def completion(i: int, text: str = "answer") -> Completion:
    return factories.completion(
        f"p{i}",
        prompt=[{"role": "user", "content": f"question {i}"}],
        completion=f"{text} {i}",
        prompt_tokens=10,
        completion_tokens=i,
        sampling={"temperature": 0.0},
        latency_s=0.5,
        started_at=1.0,
        finished_at=1.5,
    )


def failure(i: int) -> Failure:
    return factories.failure(f"p{i}", error="prompt too long", finished_at=2.0)


def lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".lock")


def test_seals_every_shard_size_records_and_indexes_them(tmp_path: Path) -> None:
    sealed: list[SealedShard] = []
    out = OutputDir(tmp_path / "out", shard_size=3, on_seal=sealed.append)
    assert out.open().done == set()
    for i in range(7):
        out.write(completion(i))
    out.close(seal=False)

    root = tmp_path / "out"
    assert names(root) == [
        "completions_000000.jsonl",
        "completions_000001.jsonl",
        "completions_000002.jsonl.open",
        "manifest.jsonl",
    ]
    assert [s.name for s in sealed] == ["completions_000000.jsonl", "completions_000001.jsonl"]
    first = sealed[0]
    data = first.path.read_bytes()
    assert (first.count, first.bytes, first.sha256) == (3, len(data), hashlib.sha256(data).hexdigest())
    entries = lines(root / "manifest.jsonl")
    assert [e["ids"] for e in entries] == [["p0", "p1", "p2"], ["p3", "p4", "p5"]]
    assert entries[1]["completion_tokens"] == 3 + 4 + 5
    assert entries[1]["prompt_tokens"] == 30
    assert [r["id"] for r in lines(root / "completions_000002.jsonl.open")] == ["p6"]


def test_resume_continues_the_open_shard_and_numbering(tmp_path: Path) -> None:
    out = OutputDir(tmp_path, shard_size=3)
    out.open()
    for i in range(4):
        out.write(completion(i))
    out.close(seal=False)

    again = OutputDir(tmp_path, shard_size=3)
    state = again.open()
    assert state.done == {"p0", "p1", "p2", "p3"}
    assert (state.completed, state.shards, state.open_count) == (4, 1, 1)
    assert state.prompt_tokens == 40
    assert state.completion_tokens == 0 + 1 + 2 + 3
    assert state.repaired == []
    for i in range(4, 6):
        again.write(completion(i))
    again.close(seal=True)

    assert names(tmp_path) == ["completions_000000.jsonl", "completions_000001.jsonl", "manifest.jsonl"]
    assert [r["id"] for r in lines(tmp_path / "completions_000001.jsonl")] == ["p3", "p4", "p5"]
    assert verify(tmp_path, [f"p{i}" for i in range(6)]).ok


def test_sealing_the_partial_shard_then_resuming_starts_a_new_shard(tmp_path: Path) -> None:
    out = OutputDir(tmp_path, shard_size=5)
    out.open()
    out.write(completion(0))
    out.close(seal=True)
    again = OutputDir(tmp_path, shard_size=5)
    assert again.open().shards == 1
    again.write(completion(1))
    again.close(seal=True)
    assert names(tmp_path) == ["completions_000000.jsonl", "completions_000001.jsonl", "manifest.jsonl"]
    assert verify(tmp_path, ["p0", "p1"]).ok


def test_a_done_id_is_never_written_twice(tmp_path: Path) -> None:
    out = OutputDir(tmp_path, shard_size=2)
    out.open()
    out.write(completion(0))
    out.write(completion(0, text="again"))
    out.fail(failure(1))
    out.write(completion(1))
    out.fail(failure(0))
    out.close(seal=True)
    assert out.duplicates == 3

    again = OutputDir(tmp_path, shard_size=2)
    again.open()
    again.write(completion(0, text="third time"))
    again.fail(failure(1))
    again.close(seal=True)
    assert again.duplicates == 2
    shard_ids = [r["id"] for p in sorted(tmp_path.glob("completions_*")) for r in lines(p)]
    assert shard_ids == ["p0"]
    assert [r["id"] for r in lines(tmp_path / "failed.jsonl")] == ["p1"]
    assert verify(tmp_path, ["p0", "p1"]).ok


def test_failures_are_durable_after_flush_and_count_as_done(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    out.open()
    out.fail(failure(7))
    assert not (tmp_path / "failed.jsonl").exists()  # buffered until the flush
    out.flush()
    assert [r["id"] for r in lines(tmp_path / "failed.jsonl")] == ["p7"]
    out.close(seal=True)
    state = OutputDir(tmp_path).open()
    assert state.failed == 1
    assert state.done == {"p7"}


def test_skips_are_recorded_once_per_source_across_runs(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    out.open()
    out.skip(Skip(source="in.jsonl:3", reason="no messages"))
    out.skip(Skip(source="in.jsonl:3", reason="no messages"))
    out.close(seal=True)
    again = OutputDir(tmp_path)
    assert again.open().skipped_sources == {"in.jsonl:3"}
    again.skip(Skip(source="in.jsonl:3", reason="no messages"))
    again.skip(Skip(source="in.jsonl:9", reason="not JSON"))
    again.close(seal=True)
    assert [r["source"] for r in lines(tmp_path / "skipped.jsonl")] == ["in.jsonl:3", "in.jsonl:9"]


def test_repeated_skip_lines_on_disk_are_dropped_on_open(tmp_path: Path) -> None:
    line = orjson.dumps({"source": "a:1", "reason": "r", "id": None, "status": "skipped"}) + b"\n"
    other = orjson.dumps({"source": "a:2", "reason": "r", "id": None, "status": "skipped"}) + b"\n"
    (tmp_path / "skipped.jsonl").write_bytes(line + other + line + line)
    state = OutputDir(tmp_path).open()
    assert state.skipped_sources == {"a:1", "a:2"}
    assert state.repaired == ["removed 2 repeated line(s) from skipped.jsonl"]
    assert (tmp_path / "skipped.jsonl").read_bytes() == line + other


def test_archive_failed_before_open_makes_failed_ids_pending_again(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    out.open()
    out.write(completion(0))
    out.fail(failure(1))
    out.close(seal=True)

    first = OutputDir(tmp_path).archive_failed()
    assert first == tmp_path / "failed.retry-1.jsonl"
    assert OutputDir(tmp_path).archive_failed() is None  # nothing left to archive

    again = OutputDir(tmp_path)
    state = again.open()
    assert state.done == {"p0"}
    assert state.failed == 0
    again.fail(failure(1))
    again.close(seal=True)
    assert OutputDir(tmp_path).archive_failed() == tmp_path / "failed.retry-2.jsonl"


def test_archive_failed_after_open_updates_the_live_state(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    state = out.open()
    out.fail(failure(1))
    assert out.archive_failed() == tmp_path / "failed.retry-1.jsonl"
    assert "p1" not in state.done
    assert state.failed == 0
    out.write(completion(1))
    out.close(seal=True)
    assert verify(tmp_path, ["p1"]).ok


def test_archive_failed_on_a_missing_directory_is_a_no_op(tmp_path: Path) -> None:
    assert OutputDir(tmp_path / "nothing").archive_failed() is None
    assert not (tmp_path / "nothing").exists()


def test_close_with_seal_removes_an_empty_open_shard(tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl.open").write_bytes(b"")
    out = OutputDir(tmp_path)
    assert out.open().open_count == 0
    out.close(seal=True)
    assert names(tmp_path) == []


def test_close_is_idempotent_and_writes_after_close_are_refused(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    out.open()
    out.write(completion(0))
    out.close(seal=True)
    out.close(seal=True)
    with pytest.raises(OutputError, match="was closed"):
        out.write(completion(1))
    assert names(tmp_path) == ["completions_000000.jsonl", "manifest.jsonl"]


def test_write_before_open_says_to_open_first(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="call open"):
        OutputDir(tmp_path).write(completion(0))


def test_a_second_writer_is_refused_while_the_first_holds_the_directory(tmp_path: Path) -> None:
    first = OutputDir(tmp_path)
    first.open()
    with pytest.raises(OutputError, match=r"another tokenmill process \(pid \d+\) is writing"):
        OutputDir(tmp_path).open()
    first.close(seal=True)
    second = OutputDir(tmp_path)
    second.open()
    second.close(seal=True)


def test_invalid_shard_size_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shard_size"):
        OutputDir(tmp_path, shard_size=0)


def test_an_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        OutputDir(tmp_path / "f").open()


def test_large_buffers_reach_the_os_before_the_periodic_flush(tmp_path: Path) -> None:
    out = OutputDir(tmp_path, shard_size=100)
    out.open()
    big = "y" * (1 << 20)
    for i in range(6):
        out.write(completion(i, text=big))
    size = (tmp_path / "completions_000000.jsonl.open").stat().st_size
    assert size >= 4 << 20
    out.close(seal=True)


def test_a_filesystem_without_locks_still_works_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = OutputDir(tmp_path)
    out.open()
    out.write(completion(0))
    out.close(seal=True)
    assert "cannot be locked on this filesystem (No locks available)" in caplog.text
    assert verify(tmp_path, ["p0"]).ok


def test_a_sealed_shard_is_dropped_from_the_page_cache_once_it_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sealed shard, and nothing else, is advised out of the page cache, after its fsync."""
    calls: list[tuple[str, int]] = []  # (what, inode) in call order
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, length, advice) == (0, 0, os.POSIX_FADV_DONTNEED)  # the whole file
        calls.append(("dontneed", os.fstat(fd).st_ino))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "posix_fadvise", fadvise, raising=False)
    out = OutputDir(tmp_path / "out", shard_size=3)
    out.open()
    for i in range(7):
        out.write(completion(i))
    out.fail(failure(9))
    out.close(seal=False)

    root = tmp_path / "out"
    sealed = [(root / f"completions_00000{k}.jsonl").stat().st_ino for k in (0, 1)]
    assert [ino for what, ino in calls if what == "dontneed"] == sealed  # not the open shard, failures, manifest
    for ino in sealed:
        assert calls.index(("fsync", ino)) < calls.index(("dontneed", ino))
    assert len(lines(root / "completions_000000.jsonl")) == 3


@pytest.mark.parametrize("advise", ["missing", "refused"])
def test_sealing_works_where_the_os_gives_no_cache_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, advise: str
) -> None:
    if advise == "missing":
        monkeypatch.delattr(os, "posix_fadvise", raising=False)
    else:

        def refuse(fd: int, offset: int, length: int, advice: int) -> None:
            raise OSError(errno.ENOSYS, "not supported")

        monkeypatch.setattr(os, "posix_fadvise", refuse, raising=False)
    out = OutputDir(tmp_path / "out", shard_size=2)
    out.open()
    for i in range(4):
        out.write(completion(i))
    out.close(seal=True)
    report = verify(tmp_path / "out")
    assert report.ok and report.counts["sealed_records"] == 4
