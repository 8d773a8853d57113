"""A real S3 API on loopback (moto's server) for store and upload tests, reached through s3fs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

# Fixed test credentials; moto accepts any. Config files are pointed away so a developer's own profile
# can never be picked up (and no real endpoint can be reached by mistake).
TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


@dataclass
class S3:
    """A running moto server and one fresh bucket in it."""

    endpoint: str
    port: int
    bucket: str
    server: Any

    def url(self, prefix: str = "corpus/run-1/") -> str:
        return f"s3://{self.bucket}/{prefix}"

    def options(self) -> dict[str, Any]:
        """storage_options for fsspec: this endpoint, few botocore retries, short timeouts."""
        return {
            "endpoint_url": self.endpoint,
            "config_kwargs": {"retries": {"total_max_attempts": 2}, "connect_timeout": 2, "read_timeout": 20},
        }

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint)

    def put(self, key: str, body: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=key, Body=body)

    def get(self, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def objects(self, prefix: str = "") -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = int(obj["Size"])
        return out

    def fresh(self) -> S3:
        """The same server with a new, empty bucket."""
        other = S3(self.endpoint, self.port, f"tm-{uuid.uuid4().hex[:12]}", self.server)
        other.client().create_bucket(Bucket=other.bucket)
        return other

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        """Start a server again on the same port (moto keeps its objects in this process)."""
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()


@contextmanager
def moto_server() -> Iterator[S3]:
    """A moto server on 127.0.0.1 (port 0) with a new bucket; stopped on exit. Use :meth:`S3.fresh` for
    another bucket on the same server (stopping a server takes ~0.5 s, so modules share one)."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in TEST_ENV}
    os.environ.update(TEST_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3(endpoint=f"http://{host}:{port}", port=port, bucket="", server=server)
    try:
        yield s3.fresh()
    finally:
        s3.server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_file(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
