"""A job's remote prefix seen as an output directory, for ``status`` and ``report`` from any machine.

The copies of its event logs, ``job.json``, summary, failures and skips (under ``_tokenmill/``) are fetched into a
local directory, and the counts come from every writer's manifest and failure copy
(:func:`~tokenmill.storage.complete.totals`). The shards are not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import StoreError
from tokenmill.output import layout
from tokenmill.storage.complete import totals
from tokenmill.storage.prefix import DIR, MANIFEST
from tokenmill.storage.store import Store

# the copied names start so (a partition's events.p001.jsonl and failed.p001.jsonl too)
_FETCHED = (layout.EVENTS.split(".")[0], layout.FAILED.split(".")[0], layout.SKIPPED.split(".")[0], layout.JOB,
            layout.SUMMARY_JSON)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RemoteView:
    """Where the copies were fetched, and the job's (completed, failed) at the prefix."""

    root: Path
    recorded: tuple[int, int]
    shown: str


def fetch_view(store: Store, dest: Path) -> RemoteView:
    """Fetch the job's records at ``store``'s prefix into ``dest`` (an empty local directory)."""
    listing = store.list()
    if MANIFEST not in listing:
        raise StoreError(f"{store.shown} holds no tokenmill job (no {MANIFEST}): check the URL and the credentials")
    dest.mkdir(parents=True, exist_ok=True)
    for name in sorted(listing):
        base = name[len(DIR) + 1 :]
        if not name.startswith(DIR + "/") or "/" in base or not base.startswith(_FETCHED):
            continue
        got = store.read(name)
        if got is not None:
            (dest / base).write_bytes(got.data)
    counts = totals(store)
    return RemoteView(dest, (counts["completions"], counts["failed"]), store.shown)
