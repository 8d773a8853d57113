"""Where a job's completions go: the output directory, the remote prefix its shards are uploaded to, and how.

Secret-looking storage options are masked (``***``) wherever the spec is written (job.json, logs, reports).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_serializer, field_validator

from tokenmill.config.base import Model, local_path


class UploadSpec(Model):
    """How sealed shards are copied to ``output.remote``: retries, and how long the end of a run waits."""

    backoff_base_s: float = Field(default=1.0, gt=0, description="First wait after a failed store operation")
    backoff_max_s: float = Field(
        default=60.0, gt=0, description="Longest wait between retries; while the run goes on, retries never stop"
    )
    drain_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="At the end of a run, how long to wait for pending uploads; then the run ends locally "
        "and rerunning the same command uploads the rest",
    )
    start_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="How long a run waits at its start for the store to confirm the prefix is this job's; a "
        "refused prefix stops the run there, a store that does not answer in time is retried in the background",
    )
    start_notice_s: float = Field(
        default=3.0,
        gt=0,
        description="A store whose first answer at the start takes longer than this is said to be slow at once (in "
        "the log and in `tokenmill status`), before its client's own retries of a refused connection end",
    )
    manifest_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="Least time between two rewrites of the remote manifest, which lists every uploaded shard "
        "(bounds the manifest traffic of long runs; the end of a run always writes it)",
    )
    side_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="Least time between two copies of the run's other records under PREFIX/_tokenmill/ (failures, "
        "skips, the event log, job.json), which let status, report and verify work from the prefix alone and a "
        "fresh machine take the job over; the end of a run always copies them",
    )
    max_backlog: int | str | None = Field(
        default=None,
        description="Sealed shards (a number) or bytes (e.g. 20GB) waiting for upload past which the run pauses "
        "generation (requests in flight finish) until the store catches up; none: never pause",
    )

    @field_validator("max_backlog")
    @classmethod
    def _backlog(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, int) and v < 1:
            raise ValueError("max_backlog must be at least 1 shard")
        if isinstance(v, str):
            parse_bytes(v)
        return v

    def backlog_limit(self) -> tuple[int | None, int | None]:
        """``max_backlog`` as (shards, bytes): one of them set, or neither."""
        v = self.max_backlog
        if v is None:
            return None, None
        if isinstance(v, int):
            return v, None
        return None, parse_bytes(v)


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
               "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


def parse_bytes(text: str) -> int:
    """``20GB``, ``512 MiB``, ``1e9`` as bytes (a ValueError naming the accepted units otherwise)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _BYTE_UNITS:
        raise ValueError(
            f"{text!r} is not a size: write a number of shards (40) or of bytes with a unit (20GB, 512MiB)"
        )
    size = int(float(m.group(1)) * _BYTE_UNITS[unit])
    if size < 1:
        raise ValueError(f"{text!r}: the backlog must be at least one byte")
    return size


MASKED = "***"  # what a secret-looking value is written as in job.json, logs and reports
_SECRET_KEY = re.compile(r"secret|token|password|passwd|credential|key|sas|signature|auth", re.IGNORECASE)


def _mask(value: Any, key: str = "") -> Any:
    """``value`` with every entry under a secret-looking key replaced by ``***``."""
    if isinstance(value, dict):
        return {k: _mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if value is not None and _SECRET_KEY.search(key):
        return MASKED
    return value


class OutputSpec(Model):
    """Where completions go."""

    dir: str = Field(description="Output directory (the source of truth for resume)")
    shard_size: int = Field(default=500, ge=1, description="Completions per sealed shard")
    remote: str | None = Field(
        default=None,
        description="fsspec URL of a prefix each sealed shard is uploaded to in the background "
        "(s3://bucket/prefix/, gs://, az://, hf://, file://); credentials come from the environment",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to fsspec for output.remote, e.g. {endpoint_url: http://127.0.0.1:9000} for an "
        "S3-compatible server; values of key/secret/token-like names are masked in job.json and logs",
    )
    delete_after_upload: bool = Field(
        default=False, description="Delete a local shard once its upload is verified (sha256 of the remote copy)"
    )
    upload: UploadSpec = Field(default_factory=UploadSpec)

    @field_validator("dir")
    @classmethod
    def _local_dir(cls, v: str) -> str:
        return local_path(
            v,
            "output.dir",
            "give a local directory here, and the URL as output.remote: every sealed shard is "
            "uploaded there as the run goes",
        )

    @field_serializer("storage_options")
    def _masked(self, value: dict[str, Any]) -> dict[str, Any]:
        return dict(_mask(value))
