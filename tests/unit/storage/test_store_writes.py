"""The store's write strategies: the table picks one per protocol, and each does what the store promises."""

from __future__ import annotations

from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from tokenmill.storage import writes
from tokenmill.storage.store import Store
from tokenmill.storage.writes import WRITES, LocalWrites, Writes


@pytest.mark.parametrize("protocol", sorted(WRITES))
def test_every_protocol_in_the_table_gets_its_strategy(protocol: str, tmp_path: Path) -> None:
    where = tmp_path.as_posix() if protocol in ("file", "local") else "bucket/prefix"
    store = Store(f"{protocol}://{where}/")
    assert type(store._writes) is WRITES[protocol]
    assert store.conditional is WRITES[protocol].atomic


def test_a_protocol_outside_the_table_checks_before_each_put() -> None:
    store = Store("memory://not-in-the-table/")
    assert type(store._writes) is Writes and not store.conditional
    assert "memory" not in WRITES


def test_every_strategy_overrides_every_write() -> None:
    for strategy in set(WRITES.values()):
        for op in ("put_file", "put_bytes", "replace"):
            assert getattr(strategy, op) is not getattr(Writes, op), f"{strategy.__name__} does not say how to {op}"


@pytest.mark.parametrize("kind", ["local", "check-then-put"])
def test_a_strategy_creates_once_and_replaces(kind: str, tmp_path: Path) -> None:
    strategy: Writes
    if kind == "local":
        strategy, root = LocalWrites(LocalFileSystem()), tmp_path.as_posix()
    else:
        strategy, root = Writes(MemoryFileSystem()), "/strategy-test"
    src = tmp_path / "shard.jsonl"
    src.write_bytes(b"shard\n")
    assert strategy.put_file(src, f"{root}/a/shard.jsonl")
    assert not strategy.put_file(src, f"{root}/a/shard.jsonl")
    assert strategy.put_bytes(f"{root}/m.json", b"one")
    assert not strategy.put_bytes(f"{root}/m.json", b"two")
    strategy.replace(f"{root}/m.json", b"three", None)
    assert strategy.fs.cat_file(f"{root}/m.json") == b"three"
    assert strategy.fs.cat_file(f"{root}/a/shard.jsonl") == b"shard\n"
    if kind == "local":  # nothing of the puts is left beside the objects
        assert not [p for p in tmp_path.rglob("*") if p.name.startswith(writes.LOCAL_TMP)]
