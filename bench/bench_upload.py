"""Upload throughput to a loopback S3 API (moto's server, through s3fs), as a run would do it.

Builds an output directory of N sealed shards with the real writer (500 completions of ~2.4 KB each, about
1.2 MB per shard, like a ShareGPT run), then times, each against a fresh bucket of one moto server:

* ``upload``: the uploader copies every shard (put-if-absent), rewriting the remote manifest as it goes;
* ``reconcile``: a resumed run finds everything uploaded (listing + manifest, no shard read);
* ``verify``: ``verify --remote`` reads every remote object back and hashes it.

moto runs in this process and on the same 2 cores, so these numbers are a floor for the client side,
not a measure of a real store. Prints the numbers and writes them to bench/results_upload.json.

    .venv/bin/python bench/bench_upload.py              # 40 shards
    .venv/bin/python bench/bench_upload.py --shards 100
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.s3server import moto_server

from tokenmill.config import OutputSpec, UploadSpec
from tokenmill.output import OutputDir, verify
from tokenmill.records import Completion
from tokenmill.storage.store import Store
from tokenmill.storage.upload import Uploader
from tokenmill.storage.verify import verify_remote

SHARD = 500
TEXT = "The quick brown fox jumps over the lazy dog. " * 50  # ~2.3 KB of completion text


def build(out: Path, shards: int) -> int:
    writer = OutputDir(out, SHARD)
    writer.open()
    for i in range(shards * SHARD):
        writer.write(
            Completion(
                id=f"p{i:08d}",
                prompt=[{"role": "user", "content": f"question {i}"}],
                completion=TEXT,
                finish_reason="stop",
                prompt_tokens=20,
                completion_tokens=500,
                model="m",
                sampling={"temperature": 0.7},
                server="http://127.0.0.1:1",
                latency_s=1.0,
                attempts=1,
                started_at=1.0,
                finished_at=2.0,
            )
        )
    writer.close(seal=True)
    return sum(p.stat().st_size for p in out.glob("completions_*.jsonl"))


def upload_once(out: Path, spec: OutputSpec) -> tuple[float, int]:
    up = Uploader(out, spec)
    started = time.perf_counter()
    up.start("bench-job")
    up.finish(True, {})
    up.join()
    status = up.status()
    assert status.complete, status.line()
    return time.perf_counter() - started, status.uploaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, moto_server() as s3:
        out = Path(tmp) / "out"
        size = build(out, args.shards)
        spec = OutputSpec(
            dir=str(out),
            remote=s3.url("bench/"),
            storage_options={"endpoint_url": s3.endpoint},
            upload=UploadSpec(manifest_interval_s=0),
        )
        took, uploaded = upload_once(out, spec)
        again, _ = upload_once(out, spec)
        report = verify(out)
        started = time.perf_counter()
        verify_remote(report, out, Store(str(spec.remote), spec.storage_options), "bench-job")
        checked = time.perf_counter() - started
        assert report.ok, report.render()
    results = {
        "shards": args.shards,
        "bytes": size,
        "upload_s": round(took, 2),
        "upload_mb_s": round(size / 1e6 / took, 1),
        "upload_shards_s": round(uploaded / took, 1),
        "reconcile_s": round(again, 2),
        "verify_remote_s": round(checked, 2),
        "verify_remote_mb_s": round(size / 1e6 / checked, 1),
    }
    print(json.dumps(results, indent=2))
    Path(__file__).with_name("results_upload.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
