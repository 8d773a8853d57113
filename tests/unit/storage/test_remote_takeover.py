"""The remote prefix as the durable record, on a local-path store (file://): a lost directory taken over from the
remote, an unlisted upload adopted, a prefix that disagrees with itself refused until repaired, a stale directory
refused, one claim shared by partitions, _SUCCESS written once by whichever partition finds all done."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import factories
from tokenmill.config import JobSpec
from tokenmill.errors import ConfigError, StoreConflict, StoreUnavailable
from tokenmill.output import OutputDir, layout, verify
from tokenmill.output.identity import check_job_identity
from tokenmill.output.scan import scan_bytes
from tokenmill.storage.audit import audit_prefix
from tokenmill.storage.prefix import MANIFEST, MARKER, RemoteManifest, aside_name, done_marker
from tokenmill.storage.restore import RemoteStart, prepare_remote
from tokenmill.storage.store import Store
from tokenmill.storage.upload import Uploader, UploadStatus

UPLOAD = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "manifest_interval_s": 0, "side_interval_s": 0}


def make_job(tmp: Path, out: Path, **upload: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "input": {"path": str(tmp / "in.jsonl"), "id_field": "id"},
            "servers": ["http://127.0.0.1:1"],
            "output": {
                "dir": str(out),
                "shard_size": 10,
                "remote": f"file://{tmp / 'remote'}",
                "upload": {**UPLOAD, "start_wait_s": 0.3, **upload},
            },
        }
    )


@dataclass
class Ran:
    start: RemoteStart
    status: UploadStatus
    written: list[str]
    done: set[str]


def one_run(
    job: JobSpec,
    ids: list[str],
    *,
    failed: tuple[str, ...] = (),
    partition: tuple[int, int] | None = None,
    finished: bool = True,
    repair: bool = False,
    store: Store | None = None,
) -> Ran:
    """What run_job does around the output and the remote, with records written by hand."""
    writer = partition[0] if partition else None
    out = OutputDir(job.output.dir, job.output.shard_size, partition=writer)
    out.lock()
    try:
        start = prepare_remote(Path(job.output.dir), job, job, writer, repair_remote=repair, store=store)
    except BaseException:
        out.close(seal=False)
        raise
    state = out.open()
    state.done.update(start.others)
    job_id = check_job_identity(out.root, start.job, False)
    names = layout.Names(writer)
    up = Uploader(
        out.root, job.output, store=start.store, partition=partition, sides=(names.failed, names.skipped, "job.json")
    )
    out.on_seal = up.enqueue
    up.start(job_id)
    done = set(state.done)  # what the start found done
    written = [i for i in ids if i not in done]
    for rid in written:
        out.write(factories.completion(rid))
    for rid in failed:
        out.fail(factories.failure(rid))
    out.close(seal=finished)
    up.finish(finished, {"failed": len(failed)})
    up.join(30)
    return Ran(start, up.status(), written, done)


def ids(a: int, b: int) -> list[str]:
    return [f"p{i:04d}" for i in range(a, b)]


def store_of(job: JobSpec) -> Store:
    assert job.output.remote
    return Store(job.output.remote)


def claim_of(store: Store) -> RemoteManifest:
    found = store.read(MANIFEST)
    assert found is not None
    return RemoteManifest.decode(found.data, "claim")


def test_a_lost_directory_is_taken_over_from_the_remote_and_nothing_is_redone(tmp_path: Path) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    first = one_run(job, ids(0, 35), failed=("x1",), finished=False)  # 3 shards up, 5 in the open shard, lost
    assert first.status.complete and first.start.taken_over is None
    shutil.rmtree(tmp_path / "a")
    second = one_run(job, ids(0, 45))
    taken = second.start.taken_over
    assert taken is not None and (taken.shards, taken.completions, taken.failed) == (3, 30, 1)
    assert second.done >= {*ids(0, 30), "x1"} and not second.done & set(ids(30, 35))
    assert second.written == ids(30, 45)  # only what the remote does not hold, the lost open shard included
    assert second.start.job_id == first.start.job_id  # the same job, wherever it runs
    names = sorted(n for n in store_of(job).list() if n.startswith("completions_"))
    assert names == [f"completions_{i:06d}.jsonl" for i in range(5)]  # new shards after the remote's, no clash
    assert second.status.marker
    report = verify(tmp_path / "a", [*ids(0, 45), "x1"])
    assert report.ok and report.counts["offloaded_shards"] == 3, report.render()
    whole = audit_prefix(store_of(job), [*ids(0, 45), "x1"])
    assert whole.ok and whole.counts["sealed_records"] == 45 and whole.counts["failed"] == 1, whole.render()


def test_an_upload_no_manifest_lists_yet_is_read_and_adopted(tmp_path: Path) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    one_run(job, ids(0, 30), finished=False)
    store = store_of(job)
    claim, tag = claim_of(store), store.read(MANIFEST).tag  # type: ignore[union-attr]
    del claim.shards["completions_000002.jsonl"]  # as if the writer died right after this upload
    store.replace_bytes(MANIFEST, claim.encode(), tag)
    shutil.rmtree(tmp_path / "a")
    second = one_run(job, ids(0, 40))
    assert second.start.taken_over is not None and second.start.taken_over.shards == 3
    assert second.written == ids(30, 40)
    assert "completions_000002.jsonl" in claim_of(store).shards  # listed once the run uploads again
    assert audit_prefix(store, ids(0, 40)).ok


def test_a_prefix_that_disagrees_with_itself_is_refused_until_repaired(tmp_path: Path) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    one_run(job, ids(0, 40), finished=False)
    store = store_of(job)
    store.remove("completions_000001.jsonl")  # listed, gone
    shard0 = store.read("completions_000000.jsonl")
    assert shard0 is not None
    store.put_bytes_if_absent("completions_000009.jsonl", shard0.data)  # the same ids twice
    shutil.rmtree(tmp_path / "a")
    with pytest.raises(StoreConflict) as refused:
        one_run(job, ids(0, 50))
    message = str(refused.value)
    assert "disagrees with itself" in message and "--repair-remote" in message
    assert "completions_000001.jsonl: listed (10 completions) but the object is gone" in message
    assert "completions_000009.jsonl: id 'p0000' is also in completions_000000.jsonl" in message
    assert not (tmp_path / "a" / "manifest.jsonl").exists()  # nothing taken over, nothing generated
    repaired = one_run(job, ids(0, 50), repair=True)
    assert any("dropped completions_000001.jsonl" in line for line in repaired.start.repaired)
    assert store.read(aside_name("completions_000009.jsonl")) is not None  # kept, out of the way
    assert sorted(repaired.written) == sorted([*ids(10, 20), *ids(40, 50)])  # the lost shard's prompts again
    assert audit_prefix(store, ids(0, 50)).ok


def test_a_directory_behind_the_remote_is_refused(tmp_path: Path) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    one_run(job, ids(0, 25), finished=False)
    shutil.copytree(tmp_path / "a", tmp_path / "stale")  # this machine goes away with its disk...
    one_run(job, ids(0, 45), finished=False)  # ...another carries the job on (here: the same directory)
    stale = job.model_copy(update={"output": job.output.model_copy(update={"dir": str(tmp_path / "stale")})})
    with pytest.raises(StoreConflict, match=r"is behind .*another machine carried this job on"):
        one_run(stale, ids(0, 45))


def test_a_fresh_directory_refuses_another_jobs_prefix(tmp_path: Path) -> None:
    one_run(make_job(tmp_path, tmp_path / "a"), ids(0, 10))
    other = make_job(tmp_path, tmp_path / "b")
    other = other.model_copy(update={"sampling": other.sampling.model_copy(update={"temperature": 0.1})})
    refusal = r"holds output of a different job \(changed: sampling: sampling.temperature 0.7 -> 0.1\)"
    refusal += r".*another output.remote, or pass --allow-changed-job"
    with pytest.raises(ConfigError, match=refusal):  # the same refusal, and detail, as a local directory's
        one_run(other, ids(0, 10))


def test_partitions_starting_together_share_one_claim(tmp_path: Path) -> None:
    jobs = [make_job(tmp_path, tmp_path / f"node-{i}") for i in range(3)]
    got: dict[int, str | None] = {}
    gate = threading.Barrier(3)

    def start(i: int) -> None:
        out = OutputDir(jobs[i].output.dir, 10, partition=i)
        out.lock()
        gate.wait()
        got[i] = prepare_remote(Path(jobs[i].output.dir), jobs[i], jobs[i], i).job_id
        out.close(seal=False)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    job_ids = {got[i] for i in range(3)}
    assert len(job_ids) == 1 and None not in job_ids
    assert claim_of(store_of(jobs[0])).job_id in job_ids
    assert all(orjson.loads((tmp_path / f"node-{i}" / "job.json").read_bytes())["job_id"] in job_ids for i in range(3))


def test_success_is_written_once_by_whichever_partition_finds_all_done(tmp_path: Path) -> None:
    jobs = [make_job(tmp_path, tmp_path / f"node-{i}") for i in range(2)]
    store = store_of(jobs[0])
    first = one_run(jobs[0], ids(0, 20), partition=(0, 2), failed=("x0",))
    assert first.status.done_marker and not first.status.marker
    assert store.read(done_marker(0)) is not None and store.read(MARKER) is None
    second = one_run(jobs[1], ids(20, 45), partition=(1, 2))
    assert second.status.marker
    marker = orjson.loads(store.read(MARKER).data)  # type: ignore[union-attr]
    assert (marker["shards"], marker["completions"], marker["failed"]) == (5, 45, 1)
    assert set(first.written) <= second.done  # partition 1 knew what partition 0 did, from the prefix alone...
    markers = {n: store.read(n) for n in (MARKER, done_marker(0), done_marker(1))}
    again = one_run(jobs[1], ids(0, 45), partition=(1, 2))  # ...and a rerun sees what every partition did
    assert again.written == [] and again.done >= {*ids(0, 45), "x0"}
    assert again.status.marker and {n: store.read(n) for n in markers} == markers  # nothing new: none rewritten
    assert audit_prefix(store, [*ids(0, 45), "x0"]).ok


def refusing(op: str, name: str) -> None:
    raise ConnectionRefusedError("connection refused")


@pytest.mark.parametrize(
    ("partition", "fresh", "outcome"),
    [(1, True, "refused"), (None, True, "carries on"), (1, False, "carries on")],
)
def test_a_store_that_does_not_answer_at_the_start(
    tmp_path: Path, partition: int | None, fresh: bool, outcome: str
) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    if not fresh:
        one_run(job, ids(0, 10), partition=(1, 2), finished=False)
    down = Store(job.output.remote or "", hook=refusing)
    out = OutputDir(job.output.dir, 10, partition=partition)
    out.lock()
    run: Callable[[], RemoteStart] = lambda: prepare_remote(Path(job.output.dir), job, job, partition, store=down)  # noqa: E731
    try:
        if outcome == "refused":
            with pytest.raises(StoreUnavailable, match=r"cannot know what is done.*Rerun when the store answers"):
                run()
        else:
            assert not run().reachable
    finally:
        out.close(seal=False)


def test_verify_of_a_prefix_alone_finds_what_is_wrong(tmp_path: Path) -> None:
    job = make_job(tmp_path, tmp_path / "a")
    one_run(job, ids(0, 40), failed=("x1",))
    store = store_of(job)
    assert audit_prefix(store, [*ids(0, 40), "x1"]).ok
    shard0 = store.read("completions_000000.jsonl")
    assert shard0 is not None
    store.remove("completions_000001.jsonl")
    store.replace_bytes("completions_000002.jsonl", shard0.data.replace(b"p0000", b"p9999"), None)
    store.put_bytes_if_absent("completions_000007.jsonl", shard0.data)  # an upload no manifest lists, ids twice
    report = audit_prefix(store, [*ids(0, 40), "x1", "p5555"])
    totals = report.totals
    assert totals["remote-missing"] == 1 and totals["remote-mismatch"] == 1 and totals["remote-unlisted"] == 1
    assert totals["duplicate"] == 19  # completions_000007's 10 ids and 9 of the changed shard's: shard 0's too
    assert totals["missing"] == 21  # shard 1's ids, shard 2's ids (now other ids), p5555
    assert totals["unexpected"] == 1 and "remote-marker" not in totals  # p9999; _SUCCESS still says the manifests


def test_a_long_run_folds_its_index_and_a_take_over_needs_no_shard_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tokenmill.storage import index
    from tokenmill.storage.readback import read_remote

    monkeypatch.setattr(index, "FOLD_AT", 3)
    job = make_job(tmp_path, tmp_path / "a")
    for end in range(10, 70, 10):  # six starts of one run, a manifest (and an index segment) each
        one_run(job, ids(0, end), finished=end == 60)
    store = store_of(job)
    claim = claim_of(store)
    assert len(claim.shards) == 6 and 1 <= len(claim.index) < 3  # folded: every shard's ids, in few segments
    state = read_remote(store)
    assert not state.problems and state.writers[None].from_bodies == 0  # every id from the index
    assert state.done()[0] == set(ids(0, 60))


def test_unlisted_uploads_are_scanned_as_they_are_read_never_all_held_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tokenmill.storage import readback

    job = make_job(tmp_path, tmp_path / "a")
    one_run(job, ids(0, 100), finished=False)  # 10 shards up
    store = store_of(job)
    claim, tag = claim_of(store), store.read(MANIFEST).tag  # type: ignore[union-attr]
    claim.shards.clear()  # as if the writer died before listing any of them: every object is read
    claim.index.clear()
    store.replace_bytes(MANIFEST, claim.encode(), tag)
    read, scanned, ahead = [0], [0], [0]
    plain_read, plain_scan = store.read, scan_bytes

    def counted_read(name: str) -> Any:
        got = plain_read(name)
        read[0] += name.startswith("completions_")
        return got

    def counted_scan(data: bytes, kind: Any, where: str) -> Any:
        if kind == "ok":
            ahead[0] = max(ahead[0], read[0] - scanned[0])
            scanned[0] += 1
        return plain_scan(data, kind, where)

    monkeypatch.setattr(store, "read", counted_read)
    monkeypatch.setattr(readback, "scan_bytes", counted_scan)
    state = readback.read_remote(store, workers=2)
    assert not state.problems and state.writers[None].from_bodies == 10
    assert state.done()[0] == set(ids(0, 100))
    assert read[0] == scanned[0] == 10
    assert ahead[0] <= 3  # the workers' reads and the next one, not the ten bodies


def test_a_take_over_leaves_out_the_remote_failures_a_shard_completes(tmp_path: Path) -> None:
    from tokenmill.output.manifest import ManifestEntry
    from tokenmill.output.takeover import take_over

    root = tmp_path / "out"
    root.mkdir()
    (root / layout.FAILED).write_bytes(orjson.dumps({"id": "p0009", "status": "failed"}) + b"\n")  # local: kept
    entries = [ManifestEntry("completions_000000.jsonl", 3, 30, "0" * 64, ids(0, 3), 3, 3, 1.0)]
    remote = b"".join(orjson.dumps({"id": rid, "status": "failed"}) + b"\n" for rid in ("p0001", "p0007", "p0009"))
    taken = take_over(root, None, entries, lambda shard: f"file:///r/{shard}", remote)
    failed = [orjson.loads(line)["id"] for line in (root / layout.FAILED).read_bytes().splitlines()]
    assert failed == ["p0009", "p0007"]  # p0001 was retried and completed; p0009 is already recorded here
    assert (taken.shards, taken.completions, taken.failed) == (1, 3, 1)
