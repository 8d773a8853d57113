"""``OUT/job.json``: the job an output directory belongs to, recorded on the first run, and the refusal of a
different job later (mixing two setups in one corpus).

The fingerprint covers what changes a completion (input, api, model, sampling, save_token_ids, and samples
when it is not 1), not the fields
that only select rows (offset, limit, on_bad_row), so trial runs with ``--limit`` extend the same output.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tokenmill.config import AUTO_ID_FIELD, MASKED, JobSpec, parse_job, set_dotted
from tokenmill.errors import ConfigError, OutputError
from tokenmill.output import layout
from tokenmill.output.fsio import atomic_create
from tokenmill.sources.ids import describe, resolve_id_field, with_ids

log = logging.getLogger(__name__)

JOB_FILE = layout.JOB
# Fields that change what a completion is; a rerun with other values would mix two datasets in one output.
FINGERPRINT_FIELDS = ("input", "api", "model", "sampling", "save_token_ids")
# Input fields that only select rows (trial runs): changing them between runs is fine.
SELECTION_FIELDS = ("offset", "limit", "on_bad_row", "max_skip_share", "skips_allowed")
# The job's input identity (dotted prefixes of the identity's leaves): which rows, and the ids made of them. Another
# value is another input, refused even with --allow-changed-job.
INPUT_IDENTITY = ("input.path", "input.hf", "input.id_field", "samples")
# Input fields that only add to the records beside the completion: changing them between runs is fine too.
RECORDING_FIELDS = ("keep_fields",)


def _identity(job: JobSpec) -> dict[str, Any]:
    data = job.model_dump(mode="json", include=set(FINGERPRINT_FIELDS))
    for key in (*SELECTION_FIELDS, *RECORDING_FIELDS):
        data["input"].pop(key, None)
    if job.samples != 1:  # other ids and seeds; left out at 1 so outputs written before samples existed resume
        data["samples"] = job.samples
    if job.thinking is not None:  # changes what is sent; left out unset, so outputs written before it resume
        data["thinking"] = job.thinking
    if data["input"].get("thinking_field") is None:
        data["input"].pop("thinking_field", None)
    return data


def fingerprint(job: JobSpec) -> str:
    """The sha256 of what makes ``job``'s completions what they are (see :data:`FINGERPRINT_FIELDS`)."""
    return hashlib.sha256(orjson.dumps(_identity(job), option=orjson.OPT_SORT_KEYS)).hexdigest()


_RECORD_KEYS = ("job_id", "fingerprint", "identity", "spec", "created_at")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """``OUT/job.json``: the job an output directory belongs to; the remote prefix's claim holds a copy.

    :meth:`from_json` reads what any version wrote (a missing or mistyped field is empty), :meth:`to_json` writes
    it back with the keys it did not know (``extra``) kept."""

    job_id: str
    fingerprint: str
    identity: dict[str, Any]
    spec: dict[str, Any]  # the job as validated, secrets masked
    created_at: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, job: JobSpec) -> JobRecord:
        """The record of a new job (a fresh job id)."""
        return cls(uuid.uuid4().hex, fingerprint(job), _identity(job), job.model_dump(mode="json"), time.time())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        def typed(key: str, kind: type[Any] | tuple[type[Any], ...], empty: Any) -> Any:
            value = data.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else empty

        return cls(
            job_id=typed("job_id", str, ""),
            fingerprint=typed("fingerprint", str, ""),
            identity=typed("identity", dict, {}),
            spec=typed("spec", dict, {}),
            created_at=float(typed("created_at", (int, float), 0.0)),
            extra={k: v for k, v in data.items() if k not in _RECORD_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "fingerprint": self.fingerprint,
            "identity": self.identity,
            "spec": self.spec,
            "created_at": self.created_at,
            **self.extra,
        }

    def job(self) -> JobSpec | None:
        """The recorded job as the typed spec (secrets stay masked); None when the record holds no job, or one
        this version cannot read (then :meth:`section` and :meth:`setting` still show what it holds)."""
        if not self.spec:
            return None
        try:
            return parse_job(copy.deepcopy(self.spec), where=JOB_FILE)
        except ConfigError as exc:
            log.debug("%s does not read as this version's job spec: %s", JOB_FILE, exc)
            return None

    def section(self, name: str) -> dict[str, Any]:
        """A section of the recorded spec (``output``, ``input``) as it was written, empty when it has none."""
        value = self.spec.get(name)
        return value if isinstance(value, dict) else {}

    def setting(self, key: str) -> str | None:
        """A string setting of the recorded job (``tokenizer``, ``api``, ``model``); None when unset."""
        value = self.spec.get(key)
        return value if isinstance(value, str) and value else None


def new_record(job: JobSpec) -> JobRecord:
    """The ``job.json`` record of a new job (a fresh job id); also what the remote prefix's claim holds."""
    return JobRecord.new(job)


def read_record(out: Path) -> JobRecord | None:
    """``OUT/job.json``, or None when there is none; an unreadable one is an :class:`OutputError`."""
    path = out / JOB_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OutputError(f"{path} is unreadable ({exc}); restore it or use a new output directory") from exc
    if not isinstance(data, dict):
        raise OutputError(f"{path} is not a job record; restore it or use a new output directory")
    return JobRecord.from_json(data)


def read_record_quietly(out: Path) -> JobRecord | None:
    """``OUT/job.json`` for a reader that shows what it can (``status``): None when it is missing or unreadable."""
    try:
        return read_record(out)
    except OutputError:
        return None


def recorded_job(out: Path, overrides: dict[str, Any] | None = None) -> JobSpec:
    """The job ``OUT/job.json`` records, with ``output.dir`` set to ``out`` and dotted-key ``overrides`` applied.

    A ConfigError says to pass the job file instead when there is no record, or when the record keeps secrets
    masked (storage options such as an S3 secret are never written to job.json)."""
    record = read_record(out)
    spec = copy.deepcopy(record.spec) if record is not None else {}
    if not spec:
        raise ConfigError(f"{out} holds no job record ({JOB_FILE}): pass the job file instead of the directory")
    if _masked(spec):
        raise ConfigError(
            f"{out / JOB_FILE} keeps the job's secrets masked (storage options): pass the job file instead of the "
            "directory"
        )
    set_dotted(spec, "output.dir", str(out))
    for key, value in (overrides or {}).items():
        set_dotted(spec, key, value)
    return parse_job(spec, where=str(out / JOB_FILE))


def _masked(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_masked(v) for v in value.values())
    if isinstance(value, list):
        return any(_masked(v) for v in value)
    return isinstance(value, str) and value == MASKED


def create_record(out: Path, record: JobRecord) -> JobRecord:
    """Write ``OUT/job.json`` unless it exists (fsynced: after a machine crash the job id must still be there, it
    owns the output.remote prefix) and return the record it holds: ``record``, or the one another process (a
    partition sharing the directory) wrote first."""
    if atomic_create(out / JOB_FILE, orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2)):
        return record
    found = read_record(out)
    if found is None:
        raise OutputError(f"{out / JOB_FILE} vanished while it was written: rerun the same command")
    return found


def changed_fields(record: JobRecord, job: JobSpec) -> list[str] | None:
    """The fingerprint fields in which ``job`` differs from ``record``; None when it is the same job."""
    if record.fingerprint == fingerprint(job):
        return None
    ident = _identity(job)
    before = record.identity
    keys = set(ident) | set(before)  # samples: only there when not 1
    return sorted(k for k in keys if before.get(k) != ident.get(k))


# Defaults that changed, with their old value: an output written before records the old one, and a job file that
# left the field out means the new one now.
CHANGED_DEFAULTS: dict[str, Any] = {"sampling.max_tokens": 2048, "input.conversation_turns": "first"}


def _leaves(before: Any, now: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, recorded value, value now) for every leaf that differs."""
    if isinstance(before, dict) and isinstance(now, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(before) | set(now)):
            out += _leaves(before.get(key), now.get(key), f"{prefix}{key}.")
        return out
    return [] if before == now else [(prefix.rstrip("."), before, now)]


def _differences(record: JobRecord, job: JobSpec) -> str:
    """The changed values, and how to go on when a changed default explains them."""
    leaves = _leaves(record.identity, _identity(job))
    if not leaves:
        return ""
    text = ": " + ", ".join(f"{key} {before!r} -> {now!r}" for key, before, now in leaves[:6])
    older = [key for key, before, _ in leaves if key in CHANGED_DEFAULTS and CHANGED_DEFAULTS[key] == before]
    if older:
        settings = ", ".join(f"{key}: {CHANGED_DEFAULTS[key]}" for key in older)
        text += (
            f". The default of {', '.join(older)} changed since this output was written: set {settings} in the job "
            "file to go on as before"
        )
    return text


# What ``--allow-changed-job`` may change: how a completion is made, never which rows and ids the job holds.
MAY_CHANGE = "api, model, sampling, thinking, save_token_ids, how a row becomes a prompt"
MAY_NOT_CHANGE = "the input (input.path or input.hf, input.id_field) and samples"


def _input_leaves(record: JobRecord, job: JobSpec) -> list[tuple[str, Any, Any]]:
    """The differences in the job's input identity (:data:`INPUT_IDENTITY`): another input, other ids."""
    return [leaf for leaf in _leaves(record.identity, _identity(job)) if leaf[0].startswith(INPUT_IDENTITY)]


def refuse_other_input(record: JobRecord, job: JobSpec, where: str, instead: str) -> None:
    """A :class:`ConfigError` when ``job`` reads another input (or makes other ids of it) than the job of
    ``record`` that wrote ``where``: refused whatever the flags, since its records would join another input's."""
    leaves = _input_leaves(record, job)
    if not leaves:
        return
    shown = ", ".join(f"{key} {before!r} -> {now!r}" for key, before, now in leaves)
    raise ConfigError(
        f"{where} holds the records of another input ({shown}): a different input never writes where another "
        f"input's records are, not even with --allow-changed-job (which may change {MAY_CHANGE}; never "
        f"{MAY_NOT_CHANGE}). Use {instead} for this input; if it is the same rows at another place, make the "
        "recorded path reach them (e.g. a link) and rerun"
    )


def refuse_changed(record: JobRecord, job: JobSpec, where: str, instead: str) -> None:
    """A :class:`ConfigError` when ``job`` is not the job of ``record`` (the one that wrote ``where``: an output
    directory, a remote prefix), naming what changed and what to use ``instead``."""
    refuse_other_input(record, job, where, instead)
    changed = changed_fields(record, job)
    if changed is None:
        return
    raise ConfigError(
        f"{where} holds output of a different job (changed: {', '.join(changed) or 'unknown'}"
        f"{_differences(record, job)}). Mixing them would make one corpus from two setups: use {instead}, or "
        f"pass --allow-changed-job if this is intended (it may change {MAY_CHANGE}; never {MAY_NOT_CHANGE})."
    )


def check_job_identity(out: Path, job: JobSpec, allow_changed: bool) -> str:
    """Record the job in ``OUT/job.json`` on the first run; refuse a different job later (``allow_changed``: one
    that differs in how completions are made; another input never). Returns the job id."""
    old = read_record(out)
    if old is not None:
        refuse_other_input(old, job, str(out), "a new output.dir")
        if not allow_changed:
            refuse_changed(old, job, str(out), "a new output.dir")
        return old.job_id
    return create_record(out, new_record(job)).job_id


def recorded_ids(record: JobRecord) -> tuple[bool, str | None]:
    """(True, the id column or None for row indices) as a job record holds them; (False, None) when it does not."""
    recorded = record.section("input")
    if "id_field" not in recorded:
        return False, None
    value = recorded["id_field"]
    if value == AUTO_ID_FIELD or not (value is None or isinstance(value, str)):
        return False, None
    return True, value


def recorded_id_field(out: Path) -> tuple[bool, str | None]:
    """(True, the id column or None for row indices) as ``OUT/job.json`` records them; (False, None) when the
    output holds no job yet. A job.json written before ids were decided automatically holds the choice too:
    its ``id_field`` was a column name or null (row indices)."""
    record = read_record_quietly(out)
    return (False, None) if record is None else recorded_ids(record)


def job_with_ids(job: JobSpec, out: Path | None = None, record: JobRecord | None = None) -> JobSpec:
    """``job`` with the source of its prompt ids decided (``input.id_field: auto``): the choice recorded in
    ``record`` (a job record from elsewhere, e.g. the remote prefix's claim) or in ``OUT/job.json`` when there is
    one (a resumed run keeps its ids), else the input's first row decides."""
    if job.input.id_field != AUTO_ID_FIELD:
        return job
    found, field = recorded_ids(record) if record is not None else recorded_id_field(out or Path(job.output.dir))
    if not found:
        field = resolve_id_field(job.input)
    log.info("%s", describe(field))
    return job.model_copy(update={"input": with_ids(job.input, field)})
