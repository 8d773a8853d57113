"""An upload run for tests: a small job's shards written and uploaded to a store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import factories
from tests.helpers.s3server import S3
from tokenmill.config import OutputSpec, UploadSpec
from tokenmill.output import OutputDir
from tokenmill.records import Completion
from tokenmill.storage.store import Store
from tokenmill.storage.upload import Uploader, UploadStatus

PREFIX = "corpus/run-1/"


JOB = "job-aaaa"


def completion(i: int) -> Completion:
    return factories.completion(
        f"p{i:05d}",
        prompt=[{"role": "user", "content": f"question {i}"}],
        completion=f"answer {i} " * 20,
        prompt_tokens=10,
        completion_tokens=40,
    )


def spec(s3: S3, tmp: Path, delete_after_upload: bool = False, **upload: Any) -> OutputSpec:
    knobs = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "drain_timeout_s": 20, "manifest_interval_s": 0, **upload}
    return OutputSpec(
        dir=str(tmp / "out"),
        shard_size=10,
        remote=s3.url(PREFIX),
        storage_options=s3.options(),
        upload=UploadSpec.model_validate(knobs),
        delete_after_upload=delete_after_upload,
    )


def write(out: OutputDir, start: int, n: int) -> None:
    for i in range(start, start + n):
        out.write(completion(i))


def run_upload(
    s3: S3,
    tmp: Path,
    records: tuple[int, int],
    *,
    hook: Callable[[str, str], None] | None = None,
    job: str = JOB,
    finished: bool = True,
    allow_existing: bool = False,
    reopen: str | None = None,
    **upload: Any,
) -> UploadStatus:
    """One 'run': open the output, start the uploader, write records, seal, drain."""
    sp = spec(s3, tmp, **upload)
    up = Uploader(
        Path(sp.dir),
        sp,
        allow_existing_prefix=allow_existing,
        store=Store(sp.remote or "", sp.storage_options, hook=hook),
        reopen=reopen,
    )
    out = OutputDir(sp.dir, sp.shard_size, on_seal=up.enqueue)
    out.open()
    up.start(job)
    write(out, *records)
    out.close(seal=True)
    up.finish(finished, {"failed": 0})
    up.join(timeout=60)
    return up.status()
