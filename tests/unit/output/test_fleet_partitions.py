"""Partitioned output: which prompts a partition owns, its own files beside the others', locks, resume
across partitions (read-only for the others' files), and one verify over all of them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import factories
from tokenmill.errors import OutputError
from tokenmill.output import OutputDir, verify
from tokenmill.output.layout import Names, list_dir
from tokenmill.records import Completion, Failure, Prompt, Skip
from tokenmill.sources.partition import only_partition, partition_of


def completion(rid: str) -> Completion:
    return factories.completion(rid, prompt=f"q {rid}", completion=f"a {rid}", prompt_tokens=3, completion_tokens=5)


def failure(rid: str) -> Failure:
    return factories.failure(rid, prompt=f"q {rid}", error="too long", finished_at=2.0)


def test_partition_of_is_stable_and_spreads_ids() -> None:
    assert partition_of("row-17", 4) == partition_of("row-17", 4)
    assert [partition_of(f"id{i}", 3) for i in range(5)] == [partition_of(f"id{i}", 3) for i in range(5)]
    counts = Counter(partition_of(f"id{i}", 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 850


def test_only_partition_splits_disjointly_and_skips_go_to_partition_zero() -> None:
    rows: list[Prompt | Skip] = [Prompt(id=f"r{i}", text="x") for i in range(50)]
    rows.append(Skip(source="in.jsonl:51", reason="bad row"))
    parts = [list(only_partition(iter(rows), p, 3)) for p in range(3)]
    ids = [r.id for part in parts for r in part if isinstance(r, Prompt)]
    assert sorted(ids) == sorted(f"r{i}" for i in range(50))
    assert [sum(isinstance(r, Skip) for r in part) for part in parts] == [1, 0, 0]


def test_partition_names() -> None:
    assert Names(3).shard(12) == "completions_p003_000012.jsonl" and Names(3).open(0).endswith(".jsonl.open")
    assert (Names(3).manifest, Names(3).failed, Names(3).skipped) == (
        "manifest.p003.jsonl",
        "failed.p003.jsonl",
        "skipped.p003.jsonl",
    )
    assert Names().manifest == "manifest.jsonl" and Names().lock == ".lock" and Names(1).lock == ".lock.p001"


def test_partitions_write_side_by_side_and_exclude_a_default_writer(tmp_path: Path) -> None:
    p0 = OutputDir(tmp_path, shard_size=2, partition=0)
    p1 = OutputDir(tmp_path, shard_size=2, partition=1)
    p0.open()
    p1.open()  # two partitions at once: fine
    with pytest.raises(OutputError, match="another tokenmill process"):
        OutputDir(tmp_path).open()
    with pytest.raises(OutputError, match="another tokenmill process"):
        OutputDir(tmp_path, partition=1).open()
    for i in range(3):
        p0.write(completion(f"a{i}"))
        p1.write(completion(f"b{i}"))
    p1.fail(failure("b9"))
    p0.close(seal=True)
    p1.close(seal=True)
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert names == [
        "completions_p000_000000.jsonl",
        "completions_p000_000001.jsonl",
        "completions_p001_000000.jsonl",
        "completions_p001_000001.jsonl",
        "failed.p001.jsonl",
        "manifest.p000.jsonl",
        "manifest.p001.jsonl",
    ]
    assert list_dir(tmp_path).partitions == {0, 1} and not list_dir(tmp_path).sealed
    report = verify(tmp_path, [*(f"a{i}" for i in range(3)), *(f"b{i}" for i in range(3)), "b9"])
    assert report.ok, report.render()
    assert report.counts["sealed_shards"] == 4 and report.counts["failed"] == 1


def test_resume_knows_every_partitions_ids_and_leaves_their_files_alone(tmp_path: Path) -> None:
    old = OutputDir(tmp_path, shard_size=10, partition=2)  # a partition of an earlier run with more clients
    old.open()
    old.write(completion("x1"))
    old.write(completion("x2"))
    old.fail(failure("x3"))
    old.close(seal=False)  # crashed: its shard stays open
    open_shard = tmp_path / Names(2).open(0)
    open_shard.write_bytes(open_shard.read_bytes() + b'{"status": "ok", "id": "x4", "torn')  # a torn tail
    size = open_shard.stat().st_size
    default = OutputDir(tmp_path, shard_size=10)
    state = default.open()
    assert {"x1", "x2", "x3"} <= state.done and "x4" not in state.done
    assert state.completed == 2 and state.failed == 1
    default.write(completion("x1"))  # already done by partition 2: dropped, not duplicated
    default.write(completion("y1"))
    default.close(seal=True)
    assert default.duplicates == 1
    assert open_shard.stat().st_size == size  # another writer's torn line is not cut by this one
    again = OutputDir(tmp_path, shard_size=10, partition=2)
    assert again.open().open_count == 2  # its owner repairs it
    again.close(seal=True)
    report = verify(tmp_path, ["x1", "x2", "x3", "y1"])
    assert report.ok, report.render()


def test_verify_finds_an_id_recorded_by_two_partitions(tmp_path: Path) -> None:
    for part in (0, 1):
        out = OutputDir(tmp_path, shard_size=5, partition=part)
        out.open()
        out.write(completion(f"own{part}"))
        out.close(seal=True)
    extra = tmp_path / Names(1).shard(0)
    text = extra.read_bytes()
    (tmp_path / Names(1).shard(1)).write_bytes(text.replace(b"own1", b"own0"))
    report = verify(tmp_path)
    assert not report.ok and report.totals.get("duplicate") == 1 and report.totals.get("unindexed") == 1


def test_retry_failed_takes_the_failures_of_every_partition(tmp_path: Path) -> None:
    for part in (0, 1):
        out = OutputDir(tmp_path, partition=part)
        out.open()
        out.fail(failure(f"bad{part}"))
        out.close(seal=True)
    archived = OutputDir(tmp_path).archive_failed()
    assert archived is not None and sorted(p.name for p in tmp_path.glob("failed*")) == [
        "failed.retry-1.jsonl",
        "failed.retry-2.jsonl",
    ]
    state = OutputDir(tmp_path).open()
    assert state.failed == 0 and not {"bad0", "bad1"} & state.done


def test_records_reader_sees_every_partition(tmp_path: Path) -> None:
    from tokenmill.output.records_reader import iter_records

    for part in (None, 0, 1):
        out = OutputDir(tmp_path, partition=part)
        out.open()
        out.write(completion(f"ok{part}"))
        out.fail(failure(f"bad{part}"))
        out.close(seal=part != 1)
    assert sorted(r["id"] for r in iter_records(tmp_path)) == ["ok0", "ok1", "okNone"]
    assert sorted(r["id"] for r in iter_records(tmp_path, failed=True)) == ["bad0", "bad1", "badNone"]
