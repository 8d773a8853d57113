"""Where a job's prompt ids come from: a column of the input, or the row index.

``input.id_field: auto`` (the default) takes the ``id`` column when the input's first row has one, and the
global row index otherwise; a column name takes that column; ``null`` always takes the row index. The choice is
made once, from the first row of the whole input (not of an ``offset``/``limit`` window, so trial runs and the
full run agree), and recorded in ``OUT/job.json``: a resumed run keeps the ids it started with.

Row indices are only stable while the input is not reordered or filtered; an ``id`` column survives both.
"""

from __future__ import annotations

from tokenmill.config import InputSpec
from tokenmill.sources.prompts import resolve_id_field

__all__ = ["describe", "resolve_id_field", "with_ids"]


def with_ids(spec: InputSpec, id_field: str | None) -> InputSpec:
    """``spec`` with its id source decided."""
    return spec.model_copy(update={"id_field": id_field})


def describe(id_field: str | None) -> str:
    """The id source in words, for the start line."""
    if id_field is None:
        return "ids: the row index (the input has no 'id' column; set input.id_field if another column holds ids)"
    return f"ids: the {id_field!r} column"
