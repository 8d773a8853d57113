"""A real S3 API on loopback (moto's server) for store and upload tests, reached through s3fs.

Tests take it as the ``s3`` fixture (tests/conftest.py: a new bucket on the module's server) or, to stop and
restart the server, as ``own_s3`` (a server of the test's own); code outside a test uses :func:`moto_server`.
"""

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


class MotoServer:
    """moto's threaded server on a fixed loopback port, which can be stopped and started again on that port
    (moto keeps its objects in this process, so a restarted server still holds them)."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._server: Any = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.port = int(self._server.get_host_and_port()[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


@dataclass
class S3:
    """A running moto server and one fresh bucket in it."""

    endpoint: str
    bucket: str
    server: MotoServer

    @property
    def port(self) -> int:
        return self.server.port

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
        other = S3(self.endpoint, f"tm-{uuid.uuid4().hex[:12]}", self.server)
        other.client().create_bucket(Bucket=other.bucket)
        return other

    def stop(self) -> None:
        """Stop the server (every bucket on it goes down)."""
        self.server.stop()

    def restart(self) -> None:
        """Start the server again on the same port, with the objects it held."""
        self.server.start()


@contextmanager
def moto_server() -> Iterator[S3]:
    """A moto server on 127.0.0.1 (port 0) with a new bucket, the test credentials in the environment; the server
    (restarted or not) is stopped on exit. Use :meth:`S3.fresh` for another bucket on the same server (stopping a
    server takes ~0.5 s, so a module shares one)."""
    saved = {k: os.environ.get(k) for k in TEST_ENV}
    os.environ.update(TEST_ENV)
    server = MotoServer()
    try:
        server.start()
        yield S3(endpoint=f"http://127.0.0.1:{server.port}", bucket="", server=server).fresh()
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_file(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
