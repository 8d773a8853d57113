"""Which metric names a query reads, and which of them nothing defines: the board's and the rules' static check.

A ``tokenmill_*`` name must be a series the exporter serves (:func:`~tokenmill.run.metrics.exported_series`), a
``tokenmill:*`` name a recording rule, an ``sglang:`` / ``vllm:`` name one that tokenmill reads from that engine
(:data:`~tokenmill.monitor.scrape.NAME_MAPS`), and ``up`` is Prometheus's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tokenmill.monitor.scrape import LABELLED_MAPS, NAME_MAPS
from tokenmill.observe.rules import RECORDED
from tokenmill.run.metrics import exported_series

_NAME = re.compile(r"(?<![\w:\"'])((?:tokenmill|sglang|vllm)[_:][A-Za-z0-9_:]*|up)(?![\w:(\"'])")
_STRINGS = re.compile(r"\"[^\"]*\"|'[^']*'")
_WORDS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def names(expr: str) -> set[str]:
    """The metric names ``expr`` reads (label names inside ``by (...)`` and strings are not names)."""
    bare = _WORDS.sub(" ", _STRINGS.sub('""', expr))
    return set(_NAME.findall(bare))


def defined() -> frozenset[str]:
    """Every name a query may read."""
    engines = {n for m in NAME_MAPS.values() for n in m.values()}
    engines |= {name for m in LABELLED_MAPS.values() for name, _, _ in m.values()}
    return frozenset(exported_series() | set(RECORDED) | engines | {"up"})


def unknown_names(exprs: Iterable[str]) -> dict[str, set[str]]:
    """Each query that reads a name nothing defines, with those names."""
    known = defined()
    out = {}
    for expr in exprs:
        missing = names(expr) - known
        if missing:
            out[expr] = missing
    return out
