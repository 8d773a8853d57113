"""The uploader's pieces on their own, on injected clocks: the one retry loop (shared with the remote stage of a
start), the remote ledger (reconciliation, the manifest interval, index before manifest), the side-file copier,
and the uploader's status on its clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.helpers import factories
from tokenmill.config import JobSpec, OutputSpec, UploadSpec
from tokenmill.errors import StoreConflict, StoreUnavailable
from tokenmill.output import OutputDir, SealedShard, manifest
from tokenmill.storage.ledger import RemoteLedger
from tokenmill.storage.prefix import RemoteManifest, RemoteShard, side_name
from tokenmill.storage.restore import prepare_remote
from tokenmill.storage.retry import retry_until
from tokenmill.storage.sides import SideCopier
from tokenmill.storage.store import Store
from tokenmill.storage.upload import Uploader

T = TypeVar("T")
SPEC = UploadSpec(backoff_base_s=1.0, backoff_max_s=4.0)


class FakeTime:
    """A clock that moves only when something sleeps on it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def flaky(failures: int, result: str = "ok") -> Callable[[], str]:
    left = [failures]

    def call() -> str:
        if left[0]:
            left[0] -= 1
            raise StoreUnavailable("the store is down")
        return result

    return call


def no_retry(what: str, fn: Callable[[], T]) -> T:
    return fn()


def test_a_store_call_is_retried_with_doubling_backoff_up_to_its_cap() -> None:
    t = FakeTime()
    told: list[float] = []
    got = retry_until(flaky(4), SPEC, clock=t, sleep=t.sleep, on_failure=lambda exc, d: told.append(d))
    assert got == "ok" and t.slept == [1.0, 2.0, 4.0, 4.0] and told == t.slept


def test_at_the_deadline_the_last_error_is_raised_and_no_wait_runs_past_it() -> None:
    t = FakeTime()
    with pytest.raises(StoreUnavailable, match="down"):
        retry_until(flaky(100), SPEC, clock=t, sleep=t.sleep, deadline=t.now + 5.5)
    assert t.slept == [1.0, 2.0, 2.5] and t.now == 105.5


def test_an_error_that_is_not_worth_retrying_escapes_at_once() -> None:
    t = FakeTime()

    def refused() -> None:
        raise StoreConflict("another job's prefix")

    with pytest.raises(StoreConflict):
        retry_until(refused, SPEC, clock=t, sleep=t.sleep)
    assert t.slept == []


def test_the_remote_stage_gives_up_on_its_own_clock(tmp_path: Path) -> None:
    def down(op: str, name: str) -> None:
        raise StoreUnavailable("the store is down")

    job = JobSpec.model_validate(
        {
            "input": {"path": str(tmp_path / "in.jsonl"), "id_field": "id"},
            "servers": ["http://127.0.0.1:1"],
            "output": {
                "dir": str(tmp_path / "out"),
                "remote": (tmp_path / "remote").as_uri(),
                "upload": {"start_wait_s": 30, "backoff_base_s": 1, "backoff_max_s": 8},
            },
        }
    )
    t = FakeTime()
    store = Store(job.output.remote or "", hook=down)
    start = prepare_remote(tmp_path / "out", job, job, None, store=store, clock=t, sleep=t.sleep)
    assert not start.reachable  # a fresh single-machine directory carries on
    assert t.slept == [1, 2, 4, 8, 8, 7] and t.now == 130  # 30 s of its clock, none of the wall's


def shards(root: Path, n: int) -> dict[str, manifest.ManifestEntry]:
    out = OutputDir(root, shard_size=2)
    out.open()
    for i in range(n):
        out.write(factories.completion(f"p{i}"))
    out.close(seal=True)
    return manifest.read(root / "manifest.jsonl").entries


def ledger(tmp_path: Path, clock: Callable[[], float], interval_s: float = 0.0) -> RemoteLedger:
    store = Store((tmp_path / "remote").as_uri())
    return RemoteLedger(store, tmp_path / "out", None, no_retry, clock, interval_s)


def test_reconcile_sorts_the_local_shards_into_there_in_the_way_and_missing(tmp_path: Path) -> None:
    local = shards(tmp_path / "out", 6)  # three shards
    a, b, c = sorted(local)
    led = ledger(tmp_path, FakeTime())
    led.manifest = RemoteManifest("job", {a: RemoteShard(2, local[a].bytes, local[a].sha256)}, index=["seg"])
    led.manifest.shards[b] = RemoteShard(2, local[b].bytes, "f" * 64)
    found = led.reconcile(local, {a: local[a].bytes, b: local[b].bytes})
    assert found.there == [a] and found.conflicting == [b]
    e = local[c]
    shard = SealedShard(tmp_path / "out" / c, c, e.count, e.bytes, e.sha256, e.encode())
    assert found.missing == [shard]


def test_the_manifest_is_due_on_the_ledgers_clock_and_indexes_before_it_lists(tmp_path: Path) -> None:
    local = shards(tmp_path / "out", 2)
    (name,) = local
    t = FakeTime()
    led = ledger(tmp_path, t, interval_s=60)
    led.open("job", allow_existing=False)
    assert led.due() is None  # nothing listed yet
    e = local[name]
    led.add(SealedShard(tmp_path / "out" / name, name, e.count, e.bytes, e.sha256, e.encode()))
    assert led.due() == -float("inf")  # never written: now
    led.write()
    assert led.due() is None
    led.add(SealedShard(tmp_path / "out" / name, name, e.count, e.bytes, e.sha256, e.encode()))
    t.now += 45
    assert led.due() == 15.0
    written = led.store.read("_tokenmill_manifest.json")
    assert written is not None
    listed = RemoteManifest.decode(written.data, "claim")
    assert list(listed.shards) == [name] and len(listed.index) == 1
    segment = led.store.read(listed.index[0])
    assert segment is not None and segment.data == e.encode()


def test_side_files_are_copied_when_they_change_and_not_before_their_interval(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "failed.jsonl").write_bytes(b'{"id": "p1"}\n')
    store = Store((tmp_path / "remote").as_uri())
    puts: list[str] = []

    def counted(what: str, fn: Callable[[], Any]) -> Any:
        puts.append(what)
        return fn()

    t = FakeTime()
    sides = SideCopier(store, out, ("failed.jsonl", "skipped.jsonl"), counted, t, interval_s=10)
    assert sides.due()
    sides.sync()
    got = store.read(side_name("failed.jsonl"))
    assert got is not None and got.data == b'{"id": "p1"}\n' and puts == ["write"]  # skipped.jsonl is not there
    assert not sides.due()
    t.now += 10
    assert sides.due()
    sides.sync()
    assert puts == ["write"]  # unchanged: not copied again


def test_the_uploader_tells_how_long_a_shard_waits_on_its_clock(tmp_path: Path) -> None:
    t = FakeTime(1000.0)
    spec = OutputSpec(dir=str(tmp_path / "out"), remote=(tmp_path / "remote").as_uri())
    up = Uploader(tmp_path / "out", spec, clock=t)
    up.enqueue(SealedShard(tmp_path / "out" / "completions_000000.jsonl", "completions_000000.jsonl", 1, 10, "0"))
    t.now += 42.0
    status = up.status()
    assert status.pending == 1 and status.pending_bytes == 10 and status.oldest_pending_s == 42.0
