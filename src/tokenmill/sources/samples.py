"""Several answers per prompt (``samples: N``): each input row becomes N prompts, ids ``{id}_gen{k}``.

The expansion happens at the input side, after the row's id is checked unique and after a split run has picked
its partition's rows, so everything that keys on ids (the done set, shards, manifests, take-over, ``verify``)
works on the expanded ids unchanged, and a row's N samples always belong to the partition of its own id.

- **Ids**: ``{id}_gen{k}`` for k = 0..N-1 (N = 1 keeps ``id``). The suffix is digits after the last ``_gen``,
  so :func:`split_sample_id` recovers (id, k) from any expanded id and two rows never share one.
- **Seeds**: ``sampling.seed + k`` when the job sets ``sampling.seed``, else ``blake2b(id) mod 2**31 + k``
  (mod 2**31): stable across runs and machines, and distinct among a row's N samples.

A Skip (a bad row under ``on_bad_row: skip``) stays one Skip: the row is recorded once, not N times.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator

from tokenmill.records import Prompt, Skip

SEED_RANGE = 1 << 31  # seeds stay positive 32-bit integers: what SGLang's sampling_seed and vLLM's seed take
_SUFFIX = "_gen"


def sample_id(primary_id: str, k: int) -> str:
    """The id of sample ``k`` of the row ``primary_id``."""
    return f"{primary_id}{_SUFFIX}{k}"


def split_sample_id(rec_id: str) -> tuple[str, int] | None:
    """(row id, k) of an expanded id, or None for an id without a ``_gen{k}`` suffix."""
    primary, sep, k = rec_id.rpartition(_SUFFIX)
    if not sep or not k.isdigit() or (len(k) > 1 and k.startswith("0")):
        return None
    return primary, int(k)


def sample_seed(primary_id: str, k: int, base: int | None) -> int:
    """The seed sample ``k`` of row ``primary_id`` is generated with (see the module docstring)."""
    if base is not None:
        return base + k
    digest = hashlib.blake2b(primary_id.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + k) % SEED_RANGE


def expand(rows: Iterator[Prompt | Skip], samples: int, base_seed: int | None) -> Iterator[Prompt | Skip]:
    """Each Prompt of ``rows`` as its ``samples`` prompts, in order (Skips and ``samples == 1`` unchanged)."""
    if samples == 1:
        yield from rows
        return
    names = [f.name for f in dataclasses.fields(Prompt) if f.name not in ("id", "primary_id", "sample", "seed")]
    for row in rows:
        if isinstance(row, Skip):
            yield row
            continue
        same = {name: getattr(row, name) for name in names}  # every other field of the row, whatever it holds
        first = sample_seed(row.id, 0, base_seed)  # one hash a row; sample k's seed is the next k
        for k in range(samples):
            seed = first + k if base_seed is not None else (first + k) % SEED_RANGE
            yield Prompt(id=sample_id(row.id, k), primary_id=row.id, sample=k, seed=seed, **same)
