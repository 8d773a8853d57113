"""What a run's stages share: set as the run goes, read by the cleanups (:mod:`tokenmill.run.runner`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.config import JobSpec
from tokenmill.monitor.snapshot import Snapshot
from tokenmill.run.target import RunTarget
from tokenmill.sources.partition import Split

__all__ = ["RunState"]


@dataclass
class RunState:
    """What the stages of one run share."""

    job: JobSpec
    clock: Callable[[], float]
    partition: tuple[int, int] | None
    split: Split | None = None  # the partition's share of the input
    job_id: str = ""
    before: tuple[int, int] = (0, 0)  # completed and failed records the output held at the start
    finished: bool = False
    final: Snapshot | None = None
    dispatch: asyncio.Task[bool] | None = None
    target: RunTarget | None = None
    reopen: str | None = None  # why this run may add to a job its prefix marks complete (None: it may not)
    reopened: bool = False  # it does: the job's _SUCCESS is withdrawn before the first new shard goes up
