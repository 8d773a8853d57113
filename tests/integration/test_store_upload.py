"""The background uploader against a real S3 API (moto's server on loopback, through s3fs)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson

from tests.helpers.s3server import S3
from tests.helpers.upload import JOB, PREFIX, run_upload, spec, write
from tests.helpers.waiting import wait_for
from tokenmill.config import OutputSpec, UploadSpec
from tokenmill.output import OutputDir, verify
from tokenmill.storage.prefix import MANIFEST, MARKER
from tokenmill.storage.store import Store
from tokenmill.storage.upload import Uploader


def local_shards(tmp: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((tmp / "out").glob("completions_*.jsonl"))}


def remote_manifest(s3: S3) -> dict[str, Any]:
    return dict(orjson.loads(s3.get(PREFIX + MANIFEST)))


def test_every_sealed_shard_is_uploaded_byte_for_byte_then_the_marker(s3: S3, tmp_path: Path) -> None:
    puts: list[str] = []
    status = run_upload(s3, tmp_path, (0, 45), hook=lambda op, name: puts.append(f"{op} {name}"))
    assert status.complete and status.marker, status.line()
    local = local_shards(tmp_path)
    assert len(local) == 5  # 4 full shards of 10 and the partial one sealed at the end
    for name, data in local.items():
        assert s3.get(PREFIX + name) == data
    man = remote_manifest(s3)
    assert man["job_id"] == JOB
    assert set(man["shards"]) == set(local)
    assert man["shards"]["completions_000004.jsonl"]["count"] == 5
    marker = orjson.loads(s3.get(PREFIX + MARKER))
    assert (marker["job_id"], marker["shards"], marker["completions"]) == (JOB, 5, 45)
    # the manifest is claimed before any shard, and the marker is the very last write
    writes = [p for p in puts if p.startswith("put ")]
    assert writes[0] == f"put {MANIFEST}" and writes[-1] == f"put {MARKER}"
    assert "upload: all 5 shards" in status.line()


def test_a_resumed_run_uploads_exactly_what_is_missing(s3: S3, tmp_path: Path) -> None:
    def store_down(op: str, name: str) -> None:
        if op == "put" and name.startswith("completions_00000") and name >= "completions_000002.jsonl":
            raise ConnectionRefusedError("store down")

    first = run_upload(s3, tmp_path, (0, 40), hook=store_down, drain_timeout_s=0.3)
    assert not first.complete and first.pending == 2 and first.uploaded == 2
    assert "rerun the same command to upload what is missing" in first.line()
    assert "store down" in first.line()
    assert not any(k.endswith(MARKER) for k in s3.objects())
    puts: list[str] = []
    second = run_upload(s3, tmp_path, (40, 10), hook=lambda op, name: puts.append(f"{op} {name}"))
    assert second.complete and second.marker
    shard_puts = sorted(p for p in puts if p.startswith("put completions_"))
    assert shard_puts == [f"put completions_00000{i}.jsonl" for i in (2, 3, 4)]
    assert (second.uploaded, second.already) == (3, 2)
    assert set(remote_manifest(s3)["shards"]) == set(local_shards(tmp_path))


def test_an_upload_that_landed_before_a_crash_is_adopted_not_repeated(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path, (0, 20), finished=False)
    man = remote_manifest(s3)
    del man["shards"]["completions_000001.jsonl"]  # as if killed between the put and the manifest write
    s3.put(PREFIX + MANIFEST, orjson.dumps(man))
    status = run_upload(s3, tmp_path, (20, 0))
    assert status.complete and (status.uploaded, status.already) == (0, 2)
    assert "completions_000001.jsonl" in remote_manifest(s3)["shards"]


def test_transient_store_errors_are_retried_until_they_pass(s3: S3, tmp_path: Path) -> None:
    failures = {"left": 6}
    lock = threading.Lock()

    def flaky(op: str, name: str) -> None:
        with lock:
            if failures["left"] > 0:
                failures["left"] -= 1
                raise TimeoutError("read timed out")

    status = run_upload(s3, tmp_path, (0, 30), hook=flaky)
    assert status.complete and status.marker
    assert status.retries == 6
    kept = {k for k in s3.objects(PREFIX) if not k.startswith(PREFIX + "_tokenmill/")}
    assert kept == {PREFIX + n for n in [*local_shards(tmp_path), MANIFEST, MARKER]}
    assert len(remote_manifest(s3)["index"]) >= 1  # the shards' ids are indexed too


def test_foreign_objects_refuse_the_prefix_unless_allowed(s3: S3, tmp_path: Path) -> None:
    s3.put(PREFIX + "report.csv", b"a,b\n")
    s3.put(PREFIX + "old/part-0.parquet", b"PAR1")
    refused = run_upload(s3, tmp_path, (0, 10))
    assert refused.fatal and "already holds 2 object(s) this job did not write" in refused.fatal
    assert "--allow-existing-prefix" in refused.fatal
    assert set(s3.objects(PREFIX)) == {PREFIX + "report.csv", PREFIX + "old/part-0.parquet"}
    allowed = run_upload(s3, tmp_path, (10, 10), allow_existing=True)
    assert allowed.complete, allowed.line()
    assert s3.get(PREFIX + "report.csv") == b"a,b\n"
    assert s3.get(PREFIX + "old/part-0.parquet") == b"PAR1"


def test_a_foreign_object_under_a_shard_name_is_never_overwritten(s3: S3, tmp_path: Path) -> None:
    s3.put(PREFIX + "completions_000001.jsonl", b"someone else's bytes\n")
    status = run_upload(s3, tmp_path, (0, 30), allow_existing=True)
    assert not status.complete and not status.marker
    assert list(status.conflicts) == ["completions_000001.jsonl"]
    assert "not overwritten" in status.line()
    assert s3.get(PREFIX + "completions_000001.jsonl") == b"someone else's bytes\n"
    assert set(remote_manifest(s3)["shards"]) == {"completions_000000.jsonl", "completions_000002.jsonl"}


def test_an_identical_object_already_there_is_adopted(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path / "a", (0, 10), job="other-job")
    same = s3.get(PREFIX + "completions_000000.jsonl")
    other = s3.fresh()
    other.put(PREFIX + "completions_000000.jsonl", same)
    status = run_upload(other, tmp_path / "b", (0, 10), allow_existing=True)
    assert status.complete and (status.uploaded, status.already) == (0, 1)


def test_another_jobs_prefix_is_refused_even_when_existing_objects_are_allowed(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path / "a", (0, 10), job="job-one")
    before = {k: s3.get(k) for k in s3.objects()}
    status = run_upload(s3, tmp_path / "b", (0, 10), job="job-two", allow_existing=True)
    assert status.fatal and "belongs to another job (job id job-one" in status.fatal
    assert {k: s3.get(k) for k in s3.objects()} == before


def test_a_store_down_at_the_end_gives_up_at_the_deadline(s3: S3, tmp_path: Path) -> None:
    def down(op: str, name: str) -> None:
        if name != MANIFEST:
            raise ConnectionRefusedError("connection refused")

    started = time.monotonic()
    status = run_upload(s3, tmp_path, (0, 20), hook=down, drain_timeout_s=0.5)
    assert time.monotonic() - started < 15
    assert status.pending == 2 and not status.complete and status.retries >= 1
    assert "connection refused" in (status.last_error or "")


def marker_object(s3: S3) -> tuple[bytes, str]:
    """_SUCCESS's body and ETag: the same object, or another one."""
    head = s3.client().head_object(Bucket=s3.bucket, Key=PREFIX + MARKER)
    return s3.get(PREFIX + MARKER), str(head["ETag"])


def test_a_finished_corpus_is_not_reopened_by_a_run_with_more_shards(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path, (0, 10))
    before = marker_object(s3)
    writes: list[str] = []
    status = run_upload(s3, tmp_path, (10, 10), hook=lambda op, name: writes.append(f"{op} {name}"))
    said = status.fatal or " ".join(status.conflicts.values())  # refused at the start, or when the shard sealed
    assert "_SUCCESS says" in said and "finished" in said and "--reopen" in said
    assert not status.complete and not status.marker and status.was_complete
    assert marker_object(s3) == before  # the same object: neither withdrawn nor rewritten
    assert PREFIX + "completions_000001.jsonl" not in s3.objects()
    assert not [w for w in writes if w.startswith(("put", "delete")) and (w.endswith(MARKER) or "completions_" in w)]


def test_a_rerun_of_a_finished_corpus_with_nothing_new_leaves_its_marker_untouched(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path, (0, 25))
    before = marker_object(s3)
    writes: list[str] = []
    status = run_upload(s3, tmp_path, (25, 0), hook=lambda op, name: writes.append(f"{op} {name}"))
    assert status.complete and status.marker and status.was_complete and not status.reopened
    assert "_SUCCESS there since an earlier run (untouched)" in status.line()
    assert marker_object(s3) == before
    assert not [w for w in writes if w.startswith(("put", "delete")) and w.endswith(MARKER)]


def test_a_finished_corpus_reopened_on_request_withdraws_its_marker_first(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path, (0, 10))
    order: list[str] = []
    status = run_upload(
        s3, tmp_path, (10, 10), hook=lambda op, name: order.append(f"{op} {name}"), reopen="the input grew"
    )
    assert status.complete and status.marker and status.reopened
    assert order.index(f"delete {MARKER}") < order.index("put completions_000001.jsonl")
    assert orjson.loads(s3.get(PREFIX + MARKER))["completions"] == 20


def test_a_marker_that_disagrees_with_the_prefix_is_corrected(s3: S3, tmp_path: Path) -> None:
    run_upload(s3, tmp_path, (0, 10))
    body = orjson.loads(s3.get(PREFIX + MARKER))
    s3.put(PREFIX + MARKER, orjson.dumps({**body, "completions": 7}))
    status = run_upload(s3, tmp_path, (10, 0))
    assert status.complete and status.marker
    assert orjson.loads(s3.get(PREFIX + MARKER))["completions"] == 10


def test_an_unfinished_run_uploads_its_shards_but_writes_no_marker(s3: S3, tmp_path: Path) -> None:
    status = run_upload(s3, tmp_path, (0, 20), finished=False)
    assert status.complete and not status.marker
    assert PREFIX + MARKER not in s3.objects()


async def test_drain_runs_off_the_event_loop(s3: S3, tmp_path: Path) -> None:
    sp = spec(s3, tmp_path)
    gate = threading.Event()

    def held(op: str, name: str) -> None:
        gate.wait(10)

    up = Uploader(Path(sp.dir), sp, store=Store(sp.remote or "", sp.storage_options, hook=held))
    out = OutputDir(sp.dir, sp.shard_size, on_seal=up.enqueue)
    out.open()
    up.start(JOB)
    write(out, 0, 20)  # enqueue must not wait for the (blocked) store
    out.close(seal=True)
    import asyncio

    task = asyncio.ensure_future(up.drain(True))
    ticks = 0
    while ticks < 5:  # the loop keeps running while the worker is blocked
        await asyncio.sleep(0)
        ticks += 1
    assert not task.done()
    gate.set()
    status = await asyncio.wait_for(task, 30)
    assert status.complete and status.marker


def test_delete_after_upload_keeps_resume_and_verify_whole(s3: S3, tmp_path: Path) -> None:
    status = run_upload(s3, tmp_path, (0, 30), delete_after_upload=True)
    assert status.complete and status.deleted == 3, status.line()
    out = tmp_path / "out"
    assert local_shards(tmp_path) == {}
    assert sorted(orjson.loads(line)["shard"] for line in (out / "offloaded.jsonl").read_bytes().splitlines()) == [
        f"completions_00000{i}.jsonl" for i in range(3)
    ]
    assert len(remote_shards_of(s3)) == 3
    # a later run resumes: the offloaded ids stay done and the shard names are not reused
    again = run_upload(s3, tmp_path, (25, 15), delete_after_upload=True, reopen="the input grew")
    assert again.complete and again.uploaded == 1
    assert sorted(remote_shards_of(s3)) == [f"completions_00000{i}.jsonl" for i in range(4)]
    assert orjson.loads(s3.get(PREFIX + "completions_000003.jsonl").splitlines()[0])["id"] == "p00030"
    report = verify(out, (f"p{i:05d}" for i in range(40)))
    assert report.ok, report.render()
    assert "4 sealed shard(s) were deleted here after a verified upload" in report.render()


def remote_shards_of(s3: S3) -> dict[str, int]:
    return {k[len(PREFIX) :]: v for k, v in s3.objects(PREFIX).items() if "completions_" in k}


def test_the_manifest_catches_up_within_its_interval_while_the_run_goes_on(s3: S3, tmp_path: Path) -> None:
    sp = spec(s3, tmp_path, manifest_interval_s=0.3)
    up = Uploader(Path(sp.dir), sp, store=Store(sp.remote or "", sp.storage_options))
    out = OutputDir(sp.dir, sp.shard_size, on_seal=up.enqueue)
    out.open()
    up.start(JOB)
    write(out, 0, 30)
    listed = wait_for(
        "three shards in the remote manifest",
        lambda: set(remote_manifest(s3)["shards"]) if PREFIX + MANIFEST in s3.objects(PREFIX) else set(),
        timeout=15,
        done=lambda shards: len(shards) >= 3,
    )
    assert listed == {f"completions_00000{i}.jsonl" for i in range(3)}
    assert PREFIX + MARKER not in s3.objects(PREFIX)
    out.close(seal=True)
    up.finish(True)
    up.join(30)
    assert up.status().marker


def test_a_long_manifest_interval_defers_the_manifest_to_the_end(s3: S3, tmp_path: Path) -> None:
    writes: list[str] = []
    status = run_upload(
        s3,
        tmp_path,
        (0, 40),
        hook=lambda op, name: writes.append(name) if op == "put" else None,
        manifest_interval_s=3600,
    )
    assert status.complete
    # claimed once, written once after the first shard (the interval starts there), once at the end
    assert writes.count(MANIFEST) == 3
    assert set(remote_manifest(s3)["shards"]) == set(local_shards(tmp_path))


async def test_drain_does_not_wait_forever_on_a_hung_store_call(s3: S3, tmp_path: Path) -> None:
    sp = spec(s3, tmp_path, drain_timeout_s=0.2)
    release = threading.Event()

    def hang(op: str, name: str) -> None:
        if name.startswith("completions_"):
            release.wait(30)  # a call that does not return (released at the end of the test)

    up = Uploader(Path(sp.dir), sp, store=Store(sp.remote or "", sp.storage_options, hook=hang))
    out = OutputDir(sp.dir, sp.shard_size, on_seal=up.enqueue)
    out.open()
    up.start(JOB)
    write(out, 0, 10)
    out.close(seal=True)
    started = time.monotonic()
    status = await up.drain(True)
    assert time.monotonic() - started < 5
    assert not status.complete and status.pending == 1
    release.set()
    up.join(10)


def test_a_local_path_prefix_works_the_same(tmp_path: Path) -> None:
    remote = tmp_path / "remote" / "run-1"
    sp = OutputSpec(
        dir=str(tmp_path / "out"), shard_size=10, remote=f"file://{remote}", upload=UploadSpec(backoff_base_s=0.01)
    )
    up = Uploader(Path(sp.dir), sp)
    out = OutputDir(sp.dir, sp.shard_size, on_seal=up.enqueue)
    out.open()
    up.start(JOB)
    write(out, 0, 25)
    out.close(seal=True)
    up.finish(True)
    up.join(30)
    assert up.status().complete and up.status().marker
    assert {p.name for p in remote.iterdir()} == {*local_shards(tmp_path), MANIFEST, MARKER, "_tokenmill"}
    for name, data in local_shards(tmp_path).items():
        assert (remote / name).read_bytes() == data
