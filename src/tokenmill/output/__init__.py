"""The output directory: durable shards, manifest, failures and skips; resume state; verification."""

from __future__ import annotations

from tokenmill.output.resume import ResumeState
from tokenmill.output.shards import DEFAULT_SHARD_SIZE, OutputDir, SealedShard
from tokenmill.output.verify import Problem, VerifyReport, verify

__all__ = ["DEFAULT_SHARD_SIZE", "OutputDir", "Problem", "ResumeState", "SealedShard", "VerifyReport", "verify"]
