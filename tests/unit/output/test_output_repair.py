"""What ``OutputDir.open`` repairs (crash damage, the derived manifest) and what it refuses to guess."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers import factories
from tokenmill.errors import OutputError
from tokenmill.output import OutputDir, verify
from tokenmill.records import Completion, Failure


def completion(i: int) -> Completion:
    return factories.completion(f"p{i}", completion=f"answer {i}", prompt_tokens=5, completion_tokens=2)


def make(root: Path, n: int, shard_size: int = 3, seal: bool = False) -> None:
    out = OutputDir(root, shard_size=shard_size)
    out.open()
    for i in range(n):
        out.write(completion(i))
    out.close(seal=seal)


def manifest_lines(root: Path) -> list[bytes]:
    return (root / "manifest.jsonl").read_bytes().splitlines(keepends=True)


def reopen(root: Path, shard_size: int = 3) -> tuple[OutputDir, list[str], set[str]]:
    out = OutputDir(root, shard_size=shard_size)
    state = out.open()
    return out, state.repaired, set(state.done)


def test_missing_manifest_is_rebuilt_from_the_shards(tmp_path: Path) -> None:
    make(tmp_path, 7)
    original = (tmp_path / "manifest.jsonl").read_bytes()
    (tmp_path / "manifest.jsonl").unlink()
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert done == {f"p{i}" for i in range(7)}
    assert repaired == [
        "indexed completions_000000.jsonl (3 records), which had no manifest line",
        "indexed completions_000001.jsonl (3 records), which had no manifest line",
    ]
    rebuilt = [orjson.loads(x) for x in manifest_lines(tmp_path)]
    before = [orjson.loads(x) for x in original.splitlines()]
    for new, old in zip(rebuilt, before, strict=True):
        assert {k: new[k] for k in ("shard", "count", "bytes", "sha256", "ids", "completion_tokens")} == {
            k: old[k] for k in ("shard", "count", "bytes", "sha256", "ids", "completion_tokens")
        }
    assert verify(tmp_path).ok


def test_a_missing_last_manifest_line_is_restored(tmp_path: Path) -> None:
    # a crash between the rename of the shard and the append of its manifest line
    make(tmp_path, 6)
    first, _ = manifest_lines(tmp_path)
    (tmp_path / "manifest.jsonl").write_bytes(first)
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert repaired == ["indexed completions_000001.jsonl (3 records), which had no manifest line"]
    assert len(done) == 6
    assert verify(tmp_path).ok


def test_a_stale_manifest_line_is_rewritten(tmp_path: Path) -> None:
    make(tmp_path, 3)
    line = orjson.loads(manifest_lines(tmp_path)[0])
    line["bytes"] = 1
    line["ids"] = ["p0"]
    line["count"] = 1
    (tmp_path / "manifest.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert len(repaired) == 1
    assert repaired[0].startswith("indexed completions_000000.jsonl again: its size")
    assert done == {"p0", "p1", "p2"}
    assert verify(tmp_path).ok


def test_a_torn_manifest_line_is_cut(tmp_path: Path) -> None:
    make(tmp_path, 6)
    data = (tmp_path / "manifest.jsonl").read_bytes()
    (tmp_path / "manifest.jsonl").write_bytes(data[:-20])
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    torn = len(manifest_lines(tmp_path)[0])
    assert f"cut a torn last line ({len(data) - 20 - torn} bytes) from manifest.jsonl" in repaired
    assert len(done) == 6
    rewritten = [orjson.loads(x) for x in manifest_lines(tmp_path)]
    original = [orjson.loads(x) for x in data.splitlines()]
    for entry in rewritten + original:
        entry.pop("sealed_at")  # the re-indexed shard's time comes from its mtime
    assert rewritten == original


def test_a_torn_manifest_with_nothing_else_wrong_is_cut_in_place(tmp_path: Path) -> None:
    make(tmp_path, 3)
    data = (tmp_path / "manifest.jsonl").read_bytes()
    (tmp_path / "manifest.jsonl").write_bytes(data + b'{"shard": "completions_0000')
    out, repaired, _ = reopen(tmp_path)
    out.close(seal=False)
    assert repaired == ["cut a torn last line (27 bytes) from manifest.jsonl"]
    assert (tmp_path / "manifest.jsonl").read_bytes() == data


def test_unreadable_and_repeated_manifest_lines_are_dropped(tmp_path: Path) -> None:
    make(tmp_path, 6)
    first, second = manifest_lines(tmp_path)
    (tmp_path / "manifest.jsonl").write_bytes(first + b"garbage\n" + first + second)
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert repaired == [
        "dropped 1 unreadable line(s) from manifest.jsonl (first: line 2, not valid JSON); the shards "
        "they described were indexed again",
        "dropped 1 repeated line(s) from manifest.jsonl",
    ]
    assert manifest_lines(tmp_path) == [first, second]
    assert len(done) == 6


def test_a_leftover_tmp_file_is_removed(tmp_path: Path) -> None:
    make(tmp_path, 3)
    (tmp_path / "manifest.jsonl.tmp").write_bytes(b"half")
    out, repaired, _ = reopen(tmp_path)
    out.close(seal=False)
    assert repaired == ["removed manifest.jsonl.tmp, left by an interrupted rewrite"]
    assert not (tmp_path / "manifest.jsonl.tmp").exists()


def test_a_deleted_shard_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    make(tmp_path, 6)
    (tmp_path / "completions_000000.jsonl").unlink()
    with pytest.raises(OutputError, match=r"lists completions_000000.jsonl \(3 completions\) but") as err:
        OutputDir(tmp_path).open()
    assert "deleted or moved" in str(err.value)
    assert "delete their lines from the manifest" in str(err.value)
    with pytest.raises(OutputError, match="but the file"):  # not "another process": the lock was released
        OutputDir(tmp_path).open()


def test_a_corrupt_sealed_shard_without_manifest_line_is_refused(tmp_path: Path) -> None:
    make(tmp_path, 3)
    (tmp_path / "manifest.jsonl").unlink()
    with (tmp_path / "completions_000000.jsonl").open("ab") as fh:
        fh.write(b"not json\n")
    with pytest.raises(OutputError, match=r"completions_000000.jsonl line 4: not valid JSON"):
        OutputDir(tmp_path).open()


def test_a_bad_line_inside_the_open_shard_is_refused(tmp_path: Path) -> None:
    make(tmp_path, 2)
    path = tmp_path / "completions_000000.jsonl.open"
    first, second = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(first + b'{"id": "x", "status": "failed"}\n' + second)
    with pytest.raises(OutputError, match=r"line 2: status is 'failed', expected 'ok'.*not crash damage"):
        OutputDir(tmp_path).open()


def test_a_torn_open_shard_is_cut_and_continued(tmp_path: Path) -> None:
    make(tmp_path, 5)
    path = tmp_path / "completions_000001.jsonl.open"
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])
    out, repaired, done = reopen(tmp_path)
    torn = len(whole.splitlines(keepends=True)[-1]) - 7
    assert repaired == [f"cut a torn last line ({torn} bytes) from completions_000001.jsonl.open"]
    assert done == {"p0", "p1", "p2", "p3"}
    out.write(completion(4))
    out.close(seal=True)
    assert verify(tmp_path, [f"p{i}" for i in range(5)]).ok


def test_a_last_line_without_its_newline_counts_as_torn(tmp_path: Path) -> None:
    make(tmp_path, 2)
    path = tmp_path / "completions_000000.jsonl.open"
    path.write_bytes(path.read_bytes()[:-1])
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert done == {"p0"}
    assert len(repaired) == 1


def test_a_torn_failed_line_is_cut(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    out.open()
    for i in range(2):
        out.fail(
            Failure(
                id=f"f{i}",
                prompt="q",
                error_type="E",
                error="e",
                http_status=None,
                server=None,
                attempts=3,
                finished_at=0.0,
            )
        )
    out.close(seal=True)
    path = tmp_path / "failed.jsonl"
    path.write_bytes(path.read_bytes()[:-3])
    again = OutputDir(tmp_path)
    state = again.open()
    again.close(seal=True)
    assert state.done == {"f0"}
    assert state.failed == 1
    assert state.repaired[0].endswith("from failed.jsonl")


def test_two_open_shards_are_refused(tmp_path: Path) -> None:
    (tmp_path / "completions_000001.jsonl.open").write_bytes(b"")
    (tmp_path / "completions_000002.jsonl.open").write_bytes(b"")
    with pytest.raises(OutputError, match="several open shards"):
        OutputDir(tmp_path).open()


def test_an_open_shard_beside_its_sealed_twin_is_refused(tmp_path: Path) -> None:
    make(tmp_path, 3)
    (tmp_path / "completions_000000.jsonl.open").write_bytes(b"")
    with pytest.raises(OutputError, match=r"both completions_000000.jsonl.open and completions_000000.jsonl"):
        OutputDir(tmp_path).open()


def test_sealed_shards_whose_size_agrees_are_not_read_on_open(tmp_path: Path) -> None:
    make(tmp_path, 6)
    # same size, different bytes: open trusts the manifest (verify is the full check)
    path = tmp_path / "completions_000000.jsonl"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"answer 0", b"ANSWER 0"))
    out, repaired, done = reopen(tmp_path)
    out.close(seal=False)
    assert repaired == []
    assert len(done) == 6
    report = verify(tmp_path)
    assert report.totals == {"mismatch": 1}


def test_a_full_open_shard_is_sealed_on_open(tmp_path: Path) -> None:
    # a crash after the shard's fsync but before its rename
    make(tmp_path, 6)
    (tmp_path / "completions_000001.jsonl").rename(tmp_path / "completions_000001.jsonl.open")
    (tmp_path / "manifest.jsonl").write_bytes(manifest_lines(tmp_path)[0])
    out, repaired, done = reopen(tmp_path)
    assert repaired == ["sealed completions_000001.jsonl, which was full but still open"]
    assert out.state.shards == 2
    assert out.state.open_count == 0
    assert len(done) == 6
    out.write(completion(6))
    out.close(seal=False)
    assert (tmp_path / "completions_000002.jsonl.open").exists()
    assert verify(tmp_path).ok
