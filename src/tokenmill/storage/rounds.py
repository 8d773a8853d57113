"""The regeneration rounds under a job's remote prefix: each round is a prefix of its own, under ``_tokenmill/``."""

from __future__ import annotations

import re

from tokenmill.storage.prefix import DIR
from tokenmill.storage.store import Store

ROUNDS = f"{DIR}/regenerate/"
_ROUND = re.compile(rf"{re.escape(ROUNDS)}round-(\d{{3,}})/")


def round_prefixes(store: Store, listing: dict[str, int] | None = None) -> dict[int, str]:
    """Round number -> the URL of that regeneration round's own prefix (under the job's ``_tokenmill/``)."""
    out: dict[int, str] = {}
    for name in store.list() if listing is None else listing:
        m = _ROUND.match(name)
        if m:
            out[int(m.group(1))] = store.url + m.group(0)
    return dict(sorted(out.items()))
