"""The shared file primitives: one atomic write (durable when asked), create-if-absent, one file lock; and the
writers of every package going through them (durably where the data must survive a machine loss)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tokenmill import fsio
from tokenmill.errors import ServerError
from tokenmill.output import OutputDir
from tokenmill.output.identity import JobRecord, create_record
from tokenmill.output.manifest import ManifestEntry, rewrite
from tokenmill.storage.store import Store

Synced = list[tuple[int, int, bool]]  # (device, inode, is a directory) of every fd passed to os.fsync


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Synced:
    calls: Synced = []
    real = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        calls.append((st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode)))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def ident(path: Path) -> tuple[int, int, bool]:
    st = path.stat()
    return st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode)


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_a_durable_write_fsyncs_the_file_and_then_its_directory(tmp_path: Path, synced: Synced) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    fsio.atomic_write(path, b"new", durable=True)
    assert path.read_bytes() == b"new"
    assert synced == [ident(path), ident(tmp_path)]  # the bytes before the rename, the rename after
    assert siblings(path) == ["state.json"]


def test_a_plain_atomic_write_replaces_without_syncing(tmp_path: Path, synced: Synced) -> None:
    path = tmp_path / "endpoints.txt"
    path.write_bytes(b"old")
    fsio.atomic_write(path, b"new")
    assert path.read_bytes() == b"new" and synced == [] and siblings(path) == ["endpoints.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")

    def refuse(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        fsio.atomic_write(path, b"new", durable=True)
    assert path.read_bytes() == b"old" and siblings(path) == ["state.json"]


def test_create_file_creates_once_durably(tmp_path: Path, synced: Synced) -> None:
    path = tmp_path / "job.json"
    assert fsio.create_file(path, lambda fh: fh.write(b"first"))
    assert synced == [ident(path), ident(tmp_path)]
    assert not fsio.create_file(path, lambda fh: fh.write(b"second"))
    assert path.read_bytes() == b"first" and siblings(path) == ["job.json"]


def _fleet_state(path: Path) -> None:
    from tokenmill.fleet.state import write_json

    write_json(path, {"status": "running"})


def _manifest(path: Path) -> None:
    rewrite(path, [ManifestEntry("completions_000000.jsonl", 1, 10, "0" * 64, ["p0"], 5, 2, 0.0)])


def _job_record(path: Path) -> None:
    create_record(path.parent, JobRecord.from_json({"job_id": "j1"}))


def _store_object(path: Path) -> None:
    Store(path.parent.as_uri()).replace_bytes(path.name, b"{}", None)


def _store_new_object(path: Path) -> None:
    assert Store(path.parent.as_uri()).put_bytes_if_absent(path.name, b"{}")


DURABLE: dict[str, tuple[str, Callable[[Path], None]]] = {
    "the fleet's state": ("state.json", _fleet_state),
    "the output's manifest": ("manifest.jsonl", _manifest),
    "job.json": ("job.json", _job_record),
    "a manifest at a local remote": ("_tokenmill_manifest.json", _store_object),
    "a new object at a local remote": ("_tokenmill_manifest.json", _store_new_object),
}


@pytest.mark.parametrize("what", sorted(DURABLE))
def test_what_must_survive_a_machine_loss_is_written_durably(what: str, tmp_path: Path, synced: Synced) -> None:
    name, write = DURABLE[what]
    path = tmp_path / name
    write(path)
    assert ident(path) in synced, "the file's bytes are not fsynced"
    assert ident(tmp_path) in synced, "the directory holding the new name is not fsynced"
    assert synced.index(ident(path)) < synced.index(ident(tmp_path))


@pytest.fixture
def through_fsio(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths written through :func:`tokenmill.fsio.atomic_file`."""
    seen: list[Path] = []
    real = fsio.atomic_file

    def spy(path: Path, **kw: Any) -> Any:
        seen.append(path)
        return real(path, **kw)

    monkeypatch.setattr(fsio, "atomic_file", spy)
    return seen


def test_the_endpoints_file_and_the_port_file_are_written_through_the_primitive(
    tmp_path: Path, through_fsio: list[Path]
) -> None:
    from tokenmill.cli.sim import _write_atomically
    from tokenmill.config.servers import Endpoint
    from tokenmill.fleet import endpoints

    endpoints.write(tmp_path / "endpoints.txt", [Endpoint("http://127.0.0.1:1", "up")])
    _write_atomically(tmp_path / "port", "1234\n")
    assert through_fsio == [tmp_path / "endpoints.txt", tmp_path / "port"]
    assert (tmp_path / "port").read_text() == "1234\n" and sorted(os.listdir(tmp_path)) == ["endpoints.txt", "port"]


def test_what_an_interrupted_write_leaves_is_swept_on_open(tmp_path: Path) -> None:
    first = OutputDir(tmp_path)
    first.open()
    first.close(seal=False)
    left = fsio.temporary(tmp_path / "manifest.jsonl")
    left.write_bytes(b"half")
    other = tmp_path / "manifest.jsonl.notes"  # not a temporary file: kept
    other.write_bytes(b"mine")
    out = OutputDir(tmp_path)
    state = out.open()
    out.close(seal=False)
    assert state.repaired == [f"removed {left.name}, left by an interrupted rewrite"]
    assert not left.exists() and other.exists()


def test_a_file_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    first = fsio.FileLock(tmp_path / ".lock")
    assert first.acquire() and first.held
    with pytest.raises(fsio.LockHeld) as held:
        fsio.FileLock(tmp_path / ".lock").acquire()
    assert held.value.holder == str(os.getpid())
    first.release()
    again = fsio.FileLock(tmp_path / ".lock")
    assert again.acquire()
    again.release()


def test_shared_holders_share_and_keep_out_an_exclusive_one(tmp_path: Path) -> None:
    a, b = fsio.FileLock(tmp_path / ".lock", shared=True), fsio.FileLock(tmp_path / ".lock", shared=True)
    assert a.acquire() and b.acquire()
    with pytest.raises(fsio.LockHeld):
        fsio.FileLock(tmp_path / ".lock").acquire()
    a.release()
    b.release()


def test_the_fleet_lock_is_the_file_lock(tmp_path: Path) -> None:
    from tokenmill.fleet.state import StateLock

    first = StateLock(tmp_path)
    first.acquire()
    with pytest.raises(ServerError, match=f"supervisor pid {os.getpid()}"):
        StateLock(tmp_path).acquire()
    first.release()
