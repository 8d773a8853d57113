"""The requests of a job file as a plan plans them (``tokenmill plan --job JOB.yaml``).

Their ``sampling.max_tokens``, whether they send ``ignore_eos`` (``sampling.extra_body.ignore_eos: true``), the
prompt lengths of a local input (measured on its first rows with its own mapping and window, with the job's
tokenizer when it has one) and their count (times ``samples``); a Hugging Face input is not read. The fleet
profile's side is :mod:`tokenmill.fleet.planned`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.config import InputSpec, JobSpec, load_job


def sends_ignore_eos(extra_body: Mapping[str, Any]) -> bool:
    """Whether a job's requests carry ``ignore_eos: true`` (in ``sampling.extra_body``, merged into every body)."""
    return extra_body.get("ignore_eos") is True


@dataclass(frozen=True, slots=True)
class JobRequests:
    """What a job sends and reads, as the planner plans it."""

    max_tokens: int
    ignore_eos: bool
    input: InputSpec | None  # a local input to measure (None: a Hugging Face dataset, not read)
    answers_per_row: int
    tokenizer: str | None
    planner_model: str | None  # monitor.planner_model
    gpu: str | None  # monitor.gpu
    gpu_file: str | None


def read_job(path: str | Path) -> JobRequests:
    """The requests and input of the job file ``path`` (validated as ``tokenmill run`` validates it)."""
    job: JobSpec = load_job(path)
    return JobRequests(
        max_tokens=job.sampling.max_tokens,
        ignore_eos=sends_ignore_eos(job.sampling.extra_body),
        input=job.input if job.input.path is not None else None,
        answers_per_row=job.samples,
        tokenizer=job.tokenizer,
        planner_model=job.monitor.planner_model,
        gpu=job.monitor.gpu,
        gpu_file=job.monitor.gpu_file,
    )
