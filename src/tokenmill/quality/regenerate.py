"""Choosing the prompts to answer again, and the job that answers them (one regeneration round, see
:mod:`tokenmill.output.rounds`).

The round's prompts are taken from the live records themselves (the prompt exactly as it was sent), so the
input need not be at hand; the round is an ordinary job over them, with the job file's servers and model, the
sampling changes asked for, and an output directory of its own under ``OUT/regenerate/``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tokenmill.config import InputSpec, JobSpec, SamplingSpec
from tokenmill.errors import ConfigError
from tokenmill.output.rounds import Round
from tokenmill.quality.records import DuplicateFinder, answer_digest, record_quality, selected
from tokenmill.records.read import CompletionRecord
from tokenmill.storage.corpus import open_corpus
from tokenmill.storage.prefix import DIR as REMOTE_OWN_DIR

_SAMPLING_FIELDS = frozenset(SamplingSpec.model_fields) - {"extra_body"}


def parse_sampling(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``["seed=1", "frequency_penalty=0.3"]`` -> ``{"seed": 1, "frequency_penalty": 0.3}`` (values read as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--sampling takes KEY=VALUE (e.g. seed=1, frequency_penalty=0.3); got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--sampling {item!r}: {exc}") from exc
    return out


def sampling_with(base: SamplingSpec, changes: dict[str, Any]) -> SamplingSpec:
    """The job's sampling with ``changes``: known fields replaced, anything else (penalties, min_p, ...) sent
    as an extra request field."""
    known = {k: v for k, v in changes.items() if k in _SAMPLING_FIELDS}
    extra = {k: v for k, v in changes.items() if k not in _SAMPLING_FIELDS}
    data = base.model_dump()
    data.update(known)
    data["extra_body"] = {**base.extra_body, **extra}
    try:
        return SamplingSpec.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"--sampling: {exc}") from exc


def row(rec: CompletionRecord) -> dict[str, Any]:
    """The input row that reproduces the record's prompt as it was sent (its id's JSON type kept)."""
    if isinstance(rec.prompt, str):
        return {"id": rec.id, "prompt": rec.prompt}
    return {"id": rec.id, "messages": rec.prompt}


def _matching(out: Path, selectors: tuple[str, ...]) -> Iterator[tuple[CompletionRecord, str]]:
    """Each live record that matches ``selectors``, with the first selector it matches (the first copy of a
    duplicated answer is not a duplicate)."""
    duplicates = DuplicateFinder()
    for rec in open_corpus(out).iter_live():
        quality = record_quality(rec)
        repeat = "duplicate" in selectors and (duplicates.seen(rec.key, answer_digest(rec)) is not None)
        chosen = selected(quality["flags"], repeat, selectors)
        if chosen is not None:
            yield rec, chosen


def choose(out: Path, selectors: tuple[str, ...]) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The rows of the live records that match ``selectors`` (the first copy of a duplicated answer is kept),
    and how many matched each selector."""
    rows: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    for rec, chosen in _matching(out, selectors):
        rows.append(row(rec))
        counts[chosen] += 1
    return rows, counts


def match_counts(out: Path, selectors: tuple[str, ...]) -> Counter[str]:
    """How many live records match each of ``selectors``, counted as :func:`choose` counts them (a record under
    the first selector it matches): the numbers a round's closing line compares with the round's ``chosen``."""
    counts: Counter[str] = Counter({sel: 0 for sel in selectors})
    counts.update(chosen for _, chosen in _matching(out, selectors))
    return counts


def closing_line(name: str, selectors: tuple[str, ...], before: dict[str, int], after: Counter[str]) -> str:
    """``round-001 (--where truncated): truncated 120 -> 8 live answers``: the signals the round was chosen by."""
    moved = ", ".join(f"{sel} {int(before.get(sel, 0)):,} -> {after.get(sel, 0):,}" for sel in selectors)
    return f"{name} (--where {','.join(selectors)}): {moved} live answers"


def round_job(job: JobSpec, rnd: Round, changes: dict[str, Any]) -> JobSpec:
    """The job that answers the round's prompts: the job file's servers, model and settings, the sampling
    changes, the round's prompts as input and its own output directory (and remote prefix, under the job's
    own ``_tokenmill/`` objects)."""
    spec = InputSpec(
        path=str(rnd.prompts_path),
        format="jsonl",
        id_field="id",
        conversation_turns=job.input.conversation_turns,
    )
    remote = job.output.remote
    if remote:
        remote = f"{remote.rstrip('/')}/{REMOTE_OWN_DIR}/regenerate/{rnd.name}/"
    output = job.output.model_copy(update={"dir": str(rnd.out), "remote": remote})
    sampling = sampling_with(job.sampling, changes)
    # the round answers the records' own ids ({id}_gen{k} with samples: N) once each
    return job.model_copy(update={"input": spec, "sampling": sampling, "output": output, "samples": 1})
