"""Rebuilding the done set from the remote prefix alone: a fresh machine takes a big job over.

Builds, in a loopback S3 API (moto's server, in a process of its own), the prefix a run of an N-prompt job with D
done leaves: D/500 shard objects of 500 completions, the claim listing them with the job's record, index segments
as a long run leaves them (a run rewrites its manifest every 30 s and folds its segments at 64), and the copy of
its failures. Then, each in a fresh process with an empty output directory, times what ``tokenmill run`` does
before it generates anything (:func:`tokenmill.storage.restore.prepare_remote`, then ``OutputDir.open``):

* ``manifest``: every shard taken from the manifest and its index (no shard object read);
* ``unlisted``: the same, with the last 20 uploads not in the manifest yet (a writer killed right after them):
  those objects are read and hashed.

Prints the numbers and writes them to bench/results_remote.json.

    .venv/bin/python bench/bench_remote.py                      # 1M prompts, 900K done
    .venv/bin/python bench/bench_remote.py --n 100000 --done 90000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SHARD = 500
SEGMENTS = 63  # a long run's manifest lists up to 63 segments before its writer folds them
UNLISTED = 20
BUCKET = "bench"
PREFIX = "corpus/run-1/"
ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}  # fmt: skip

_MOTO = r"""
import sys, time, logging
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the parent closes our stdin
"""

# Runs in a fresh interpreter with an empty output directory; prints one JSON object.
_CHILD = r"""
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from tokenmill.config import JobSpec
from tokenmill.output import OutputDir
from tokenmill.storage.restore import prepare_remote

def rss_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

job = JobSpec.model_validate(json.loads(sys.argv[1]))
t1 = time.perf_counter()
out = OutputDir(job.output.dir, job.output.shard_size)
out.lock()
start = prepare_remote(Path(job.output.dir), job, job, None)
t2 = time.perf_counter()
state = out.open()
t3 = time.perf_counter()
out.close(seal=False)
print(json.dumps({
    "import_s": t1 - t0, "remote_s": t2 - t1, "open_s": t3 - t2, "rebuild_s": t3 - t1,
    "done": len(state.done), "shards": start.taken_over.shards if start.taken_over else 0,
    "failed": state.failed, "peak_rss_mb": rss_mb(),
}))
"""


def _record(i: int) -> bytes:
    return orjson.dumps({
        "id": f"p{i:08d}", "status": "ok", "prompt": [{"role": "user", "content": f"question {i}"}],
        "completion": f"answer {i}", "finish_reason": "stop", "prompt_tokens": 12, "completion_tokens": 40,
        "model": "m", "sampling": {}, "server": "http://127.0.0.1:1", "latency_s": 1.0, "attempts": 1,
        "started_at": 1.0, "finished_at": 2.0,
    }) + b"\n"  # fmt: skip


def build(client: Any, n: int, done: int, unlisted: int) -> dict[str, Any]:
    """Put the prefix a run of ``n`` prompts with ``done`` completed leaves (the last ``unlisted`` shards not in
    its manifest yet); returns the job spec (as a dict) a fresh machine runs."""
    from tokenmill.config import JobSpec
    from tokenmill.output.identity import new_record
    from tokenmill.output.manifest import ManifestEntry
    from tokenmill.storage.index import encode
    from tokenmill.storage.prefix import MANIFEST, RemoteManifest, RemoteShard, index_name, side_name

    spec: dict[str, Any] = {
        "input": {"path": "unused.jsonl", "id_field": "id"},
        "servers": ["http://127.0.0.1:1"],
        "output": {"dir": "unused", "shard_size": SHARD, "remote": f"s3://{BUCKET}/{PREFIX}",
                   "storage_options": {"endpoint_url": client.meta.endpoint_url}},
    }  # fmt: skip
    record = new_record(JobSpec.model_validate(spec))
    head = RemoteManifest(job_id=record.job_id, job=record.to_json())
    lines: list[bytes] = []

    def put(key: str, body: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=body)

    def shard(k: int) -> None:
        body = b"".join(_record(i) for i in range(k * SHARD, (k + 1) * SHARD))
        name = f"completions_{k:06d}.jsonl"
        put(name, body)
        sha = hashlib.sha256(body).hexdigest()
        ids = [f"p{i:08d}" for i in range(k * SHARD, (k + 1) * SHARD)]
        entry = ManifestEntry(name, SHARD, len(body), sha, ids, 12 * SHARD, 40 * SHARD, time.time())
        if k < done // SHARD - unlisted:
            head.shards[name] = RemoteShard(SHARD, len(body), sha)
            lines.append(entry.encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(shard, range(done // SHARD)))
    lines.sort()
    per = max(1, -(-len(lines) // SEGMENTS))
    for start in range(0, len(lines), per):
        data = encode(lines[start : start + per])
        name = index_name(None, data)
        put(name, data)
        head.index.append(name)
    failures = b"".join(
        orjson.dumps({"id": f"x{i:06d}", "status": "failed", "prompt": "q", "error_type": "PermanentError",
                      "error": "too long", "http_status": 400, "server": "s", "attempts": 1, "finished_at": 1.0})
        + b"\n"
        for i in range(1000)
    )  # fmt: skip
    put(side_name("failed.jsonl"), failures)
    put(MANIFEST, head.encode())
    return spec


def run(n: int = 1_000_000, done: int = 900_000) -> dict[str, Any]:
    import boto3

    env = {**os.environ, **ENV}
    os.environ.update(ENV)
    moto = subprocess.Popen([sys.executable, "-c", _MOTO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert moto.stdout is not None
        port = int(moto.stdout.readline())
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
        results: dict[str, Any] = {"prompts": n, "done": done, "shards": done // SHARD, "modes": {}}
        for mode, unlisted in (("manifest", 0), ("unlisted", UNLISTED)):
            bucket_reset(client)
            t0 = time.perf_counter()
            spec = build(client, n, done, unlisted)
            setup_s = time.perf_counter() - t0
            with tempfile.TemporaryDirectory(prefix="tm-bench-remote-") as tmp:
                spec["output"]["dir"] = str(Path(tmp) / "out")
                res = subprocess.run(
                    [sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True, text=True, env=env
                )
            if res.returncode != 0:
                raise RuntimeError(f"rebuild ({mode}) failed: {res.stderr[-2000:]}")
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row.update(setup_s=setup_s, unlisted=unlisted)
            results["modes"][mode] = row
        return results
    finally:
        if moto.stdin is not None:
            moto.stdin.close()
        moto.wait(30)


def bucket_reset(client: Any) -> None:
    """An empty bucket for the next mode (moto keeps objects in memory: drop the last mode's)."""
    try:
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=BUCKET):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})
    except client.exceptions.NoSuchBucket:
        client.create_bucket(Bucket=BUCKET)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--done", type=int, default=900_000)
    args = parser.parse_args()
    res = run(args.n, args.done)
    print(json.dumps(res, indent=2))
    (HERE / "results_remote.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
