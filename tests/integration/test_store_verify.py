"""verify --remote (remote_verify) against a real S3 API: every kind of difference is reported."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers.s3server import S3
from tests.helpers.upload import JOB, PREFIX, run_upload
from tokenmill.errors import StoreError
from tokenmill.output import verify
from tokenmill.storage.prefix import MANIFEST, MARKER
from tokenmill.storage.store import Store
from tokenmill.storage.verify import remote_target, verify_remote


@pytest.fixture
def uploaded(s3: S3, tmp_path: Path) -> S3:
    """A bucket with a finished upload of 30 records in it."""
    status = run_upload(s3, tmp_path, (0, 30))
    assert status.complete and status.marker
    return s3


def check(s3: S3, tmp_path: Path, job_id: str | None = JOB) -> dict[str, int]:
    out = tmp_path / "out"
    report = verify(out)
    verify_remote(report, out, Store(s3.url(PREFIX), s3.options()), job_id)
    return report.totals


@pytest.mark.usefixtures("uploaded")
def test_a_faithful_copy_verifies(s3: S3, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = verify(out)
    verify_remote(report, out, Store(s3.url(PREFIX), s3.options()), JOB)
    assert report.ok, report.render()
    assert (report.counts["remote_shards"], report.counts["remote_records"]) == (3, 30)


@pytest.mark.usefixtures("uploaded")
def test_each_difference_is_reported(s3: S3, tmp_path: Path) -> None:
    s3.put(PREFIX + "completions_000000.jsonl", s3.get(PREFIX + "completions_000000.jsonl").replace(b"p", b"q"))
    s3.client().delete_object(Bucket=s3.bucket, Key=PREFIX + "completions_000001.jsonl")
    s3.put(PREFIX + "completions_000009.jsonl", b"{}\n")
    assert check(s3, tmp_path) == {"remote-mismatch": 1, "remote-missing": 1, "remote-extra": 1}


@pytest.mark.usefixtures("uploaded")
def test_manifest_and_marker_disagreements_are_reported(s3: S3, tmp_path: Path) -> None:
    man = orjson.loads(s3.get(PREFIX + MANIFEST))
    del man["shards"]["completions_000002.jsonl"]
    s3.put(PREFIX + MANIFEST, orjson.dumps(man))
    marker = orjson.loads(s3.get(PREFIX + MARKER))
    s3.put(PREFIX + MARKER, orjson.dumps({**marker, "completions": 29}))
    assert check(s3, tmp_path) == {"remote-unlisted": 1, "remote-marker": 1}
    assert check(s3, tmp_path, job_id="someone-else") == {
        "remote-unlisted": 1,
        "remote-marker": 1,
        "remote-manifest": 1,
    }


def test_remote_target_comes_from_job_json_without_masked_values(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_bytes(
        orjson.dumps(
            {
                "job_id": "j1",
                "spec": {
                    "output": {"remote": "s3://b/p/", "storage_options": {"secret": "***", "endpoint_url": "http://h"}}
                },
            }
        )
    )
    assert remote_target(tmp_path) == ("s3://b/p/", {"endpoint_url": "http://h"}, "j1")
    assert remote_target(tmp_path, "s3://other/")[0] == "s3://other/"
    with pytest.raises(StoreError, match="pass the prefix with --remote-url"):
        remote_target(tmp_path / "nothing-here")
