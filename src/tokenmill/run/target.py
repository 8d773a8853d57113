"""Where a run writes: the job's own output and prefix, or a trial run's, which never touches the job's prefix.

A run is a **trial** when its command line reads other rows than the job file says (``--limit``/``--offset``
other than the file's ``input.limit``/``input.offset``), or writes to another directory (``-o``) than the file's
``output.dir``. The job file is the job: its own ``input.limit``/``input.offset`` make no trial, they define the
job's input. A trial does not claim, upload to, or mark complete the job's ``output.remote``, unless asked:

- ``--remote URL`` sends it to a prefix of its own, where the trial is a whole job (claimed, uploaded, and given
  its own ``_SUCCESS`` when it finishes);
- ``--upload`` sends it to the job's ``output.remote``; a trial whose input is cut then never writes the prefix's
  ``_SUCCESS`` (the job is not done until every row of its input is): a run of the whole input does.

:func:`decide_target` is the one place that decides; the runner logs :meth:`RunTarget.line` as its start line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.config import JobSpec
from tokenmill.config.base import read_mapping
from tokenmill.errors import ConfigError
from tokenmill.storage.store import display_url


@dataclass(frozen=True, slots=True)
class AsWritten:
    """What the job file itself says of the fields a trial changes, before the command line's overrides."""

    dir: str | None = None
    offset: int = 0
    limit: int | None = None

    @classmethod
    def read(cls, path: str | Path) -> AsWritten:
        """The job file's own ``output.dir``, ``input.offset`` and ``input.limit`` (``load_job`` checks them)."""
        data = read_mapping(Path(path), "job file", "job fields (input, servers, output, ...)")
        out, inp = data.get("output"), data.get("input")
        out = out if isinstance(out, dict) else {}
        inp = inp if isinstance(inp, dict) else {}
        return cls(dir=_str(out.get("dir")), offset=_int(inp.get("offset")) or 0, limit=_int(inp.get("limit")))


@dataclass(frozen=True, slots=True)
class RunTarget:
    """Where one run writes, and why."""

    out_dir: str
    remote: str | None  # the prefix this run uploads to (None: no upload)
    job_remote: str | None  # the job file's output.remote
    trial: tuple[str, ...] = ()  # why this run is a trial (empty: it is the job itself)
    via: str = ""  # how a trial's upload was asked for: "--remote" or "--upload"
    success: bool = True  # a finished run marks the prefix complete (_SUCCESS, or a partition's done marker)

    @property
    def is_trial(self) -> bool:
        return bool(self.trial)

    def apply(self, job: JobSpec) -> JobSpec:
        """``job`` writing where this target says (its output.remote replaced, or removed for no upload)."""
        if job.output.remote == self.remote and job.output.dir == self.out_dir:
            return job
        output = job.output.model_copy(update={"dir": self.out_dir, "remote": self.remote})
        return job.model_copy(update={"output": output})

    def line(self) -> str:
        """The run's start line: where it writes, and where it does not."""
        head = f"trial run ({'; '.join(self.trial)}): " if self.trial else ""
        where = f"writing to {self.out_dir}"
        if self.remote is None:
            if self.job_remote is None:
                return f"{head}{where}; no upload (output.remote is not set)"
            return (
                f"{head}{where}; no upload (trial run: the job's output.remote {display_url(self.job_remote)} is not "
                "touched; --remote URL uploads the trial to a prefix of its own, --upload to the job's)"
            )
        shown = display_url(self.remote)
        if not self.trial:
            return f"{where}, uploading to {shown}" + (" (--remote)" if self.via else " (output.remote)")
        if self.via == "--remote":
            return f"{head}{where}, uploading to {shown} (--remote: a prefix of its own, with its own _SUCCESS)"
        tail = "" if self.success else "; the input is cut, so its _SUCCESS is left to a run of the whole input"
        return f"{head}{where}, uploading to {shown} (--upload: the job's output.remote{tail})"


def decide_target(
    job: JobSpec,
    written: AsWritten | None = None,
    *,
    remote: str | None = None,
    upload: bool = False,
) -> RunTarget:
    """Where ``job`` (the command line's overrides applied) writes, given what its file says (``written``; None:
    the job is run as it is, e.g. by ``demo`` or a regeneration round), ``--remote URL`` and ``--upload``."""
    if remote is not None and upload:
        raise ConfigError(
            "give --remote URL (a prefix of the trial's own) or --upload (the job's output.remote), not both"
        )
    spec = job.output
    reasons: list[str] = []
    cut = False
    if written is not None:
        if job.input.limit != written.limit and job.input.limit is not None:
            reasons.append(f"--limit {job.input.limit}")
            cut = True
        if job.input.offset != written.offset:
            reasons.append(f"--offset {job.input.offset}")
            cut = True
        if written.dir is not None and not _same_dir(spec.dir, written.dir):
            reasons.append(f"-o {spec.dir} is not the job's output.dir {written.dir}")
    trial = tuple(reasons)
    if remote is not None and _same_prefix(remote, spec.remote):
        remote, upload = None, True  # the job's own prefix, named on the command line: as --upload
    if remote is not None:
        return RunTarget(spec.dir, remote, spec.remote, trial, via="--remote")
    if not trial:
        return RunTarget(spec.dir, spec.remote, spec.remote)
    if upload:
        if spec.remote is None:
            raise ConfigError(
                "--upload sends a trial run to the job's output.remote, and the job file sets none: give "
                "--remote URL to upload the trial to a prefix of its own"
            )
        return RunTarget(spec.dir, spec.remote, spec.remote, trial, via="--upload", success=not cut)
    return RunTarget(spec.dir, None, spec.remote, trial)


def _same_dir(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _same_prefix(a: str, b: str | None) -> bool:
    return b is not None and a.rstrip("/") == b.rstrip("/")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
