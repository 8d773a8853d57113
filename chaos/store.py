"""The object store of the run: moto's S3 server on 127.0.0.1, in this process, that can be taken away.

Stopping the server thread refuses every connection (the store is down); starting a new one on the same
port brings it back with every bucket and object as it was (moto keeps them in this process).
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

HOST = "127.0.0.1"
PREFIX = "chaos/corpus/"

# moto accepts any credentials; config files point nowhere so a real profile is never picked up.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "chaos-testing",
    "AWS_SECRET_ACCESS_KEY": "chaos-testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


class MotoStore:
    """One moto server and one bucket; :meth:`down` and :meth:`up` make an outage."""

    def __init__(self) -> None:
        self.port = 0
        self.bucket = f"chaos-{uuid.uuid4().hex[:10]}"
        self._server: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The run's output.remote."""
        return f"s3://{self.bucket}/{PREFIX}"

    def storage_options(self) -> dict[str, Any]:
        """output.storage_options: this endpoint, few botocore retries, short timeouts."""
        return {
            "endpoint_url": self.endpoint,
            "config_kwargs": {"retries": {"total_max_attempts": 2}, "connect_timeout": 2, "read_timeout": 10},
        }

    def start(self) -> None:
        """Start the server on a free port and create the bucket."""
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._serve(0)
        self._client().create_bucket(Bucket=self.bucket)

    def down(self) -> None:
        """Take the store away: connections to it are refused until :meth:`up`."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def up(self) -> None:
        """Bring the store back on the same port, with everything it held."""
        if self._server is None:
            self._serve(self.port)

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def read(self, name: str) -> bytes | None:
        """The content of the object ``name`` under the run's prefix, or None when there is none."""
        client = self._client()
        try:
            return bytes(client.get_object(Bucket=self.bucket, Key=PREFIX + name)["Body"].read())
        except client.exceptions.NoSuchKey:
            return None

    def names(self, start: str = "") -> list[str]:
        """The objects under the run's prefix whose names start with ``start`` (relative names)."""
        found: list[str] = []
        pages = self._client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=PREFIX + start)
        for page in pages:
            found += [str(o["Key"])[len(PREFIX) :] for o in page.get("Contents", [])]
        return found

    def _client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def stop(self) -> None:
        """Stop for good (end of the run)."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _serve(self, port: int) -> None:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
        server.start()
        self.port = int(server.get_host_and_port()[1])
        self._server = server
