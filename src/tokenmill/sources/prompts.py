"""``iter_prompts``: the input side of a job, from ``InputSpec`` to a stream of Prompt or Skip records.

One row's way through:

1. A reader decodes it (``readers``, ``jsonarray`` or ``hf``) into a RawRow numbered by its global row
   index: rows count from 0 across all files in sorted order, bad rows included, blank lines not.
2. ``offset``/``limit`` cut a window of row indexes, ``[offset, offset + limit)``, before anything else, so
   a window always covers the same rows; rows before the window are counted but not decoded.
3. The row must be a JSON object; its id is ``row[id_field]`` (unique; checked against an IdSet) or its
   global row index as a string, so ``offset: 100`` starts at id ``"100"`` (``ids`` says which: by default
   the ``id`` column when the input has one). An integer id keeps its type in the records (``Prompt.id_value``)
   while ``Prompt.id``, the key of every id set, is its decimal string: ``7`` and ``"7"`` are the same id.
4. ``mapping.RowMapper`` turns it into a Prompt, or says why it cannot.
5. A row that fails 1, 3 or 4 raises BadRowError under ``on_bad_row: error`` and becomes a Skip under
   ``on_bad_row: skip``. A Skip for a duplicate has ``id=None``: its id belongs to the earlier row.

Errors that are not about one row (a missing file, a Parquet schema without the prompt column, a file that
cannot be read on) raise InputError under either policy. An empty input yields nothing.

With ``samples: N`` (:mod:`tokenmill.sources.samples`) each Prompt is then yielded as N prompts,
``{id}_gen0`` .. ``{id}_gen{N-1}``, after the id check and the partition's choice of rows.

A partition of a split run (:mod:`tokenmill.sources.partition`) gets only its rows: by ids, every row is read
and the others' dropped; by files, the others' files are never decoded (only counted, to keep the row indexes,
when the ids are row indexes or a window is set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tokenmill.config import AUTO_ID_COLUMN, AUTO_ID_FIELD, InputSpec
from tokenmill.errors import BadRowError
from tokenmill.records import Prompt, Skip
from tokenmill.sources.files import resolve_files
from tokenmill.sources.hf import read_hf
from tokenmill.sources.idset import IdSet
from tokenmill.sources.mapping import RowMapper, RowProblem, json_type, row_id
from tokenmill.sources.partition import Split, only_partition
from tokenmill.sources.readers import open_rows, row_count
from tokenmill.sources.rows import RawRow
from tokenmill.sources.samples import expand


def iter_prompts(
    spec: InputSpec, split: Split | None = None, samples: int = 1, seed: int | None = None
) -> Iterator[Prompt | Skip]:
    """Stream the prompts ``spec`` describes (only ``split``'s when given), in input order, each row as its
    ``samples`` prompts (``seed``: the job's ``sampling.seed``; see :mod:`tokenmill.sources.samples`); see the
    module docstring for the rules."""
    if spec.id_field == AUTO_ID_FIELD:
        spec = spec.model_copy(update={"id_field": resolve_id_field(spec)})
    if split is not None and split.by == "ids":
        # by the row's own id, before the expansion: a row's samples stay on one partition
        return expand(only_partition(_prompts(spec, None), split.index, split.count), samples, seed)
    return expand(_prompts(spec, split.owns_file if split is not None else None), samples, seed)


def _prompts(spec: InputSpec, owns: Callable[[int], bool] | None) -> Iterator[Prompt | Skip]:
    mapper = RowMapper(spec)
    id_field = spec.id_field
    seen = IdSet()  # used only with an id_field; index ids are unique by construction
    for index, raw in _rows(spec, owns):
        pid = str(index) if id_field is None else None  # the id a Skip can report, once known
        item: Prompt | Skip
        try:
            row = _object(raw)
            key = str(index) if id_field is None else _unique_id(row, id_field, seen)
            value = row.get(id_field) if id_field is not None else None
            pid = key
            item = mapper.prompt(row, key, raw.source)
            item.thinking = mapper.thinking(row)
            if isinstance(value, int) and not isinstance(value, bool):
                item.id_value = value  # the id's JSON type, kept for the records
        except RowProblem as problem:
            if spec.on_bad_row == "error":
                raise BadRowError(raw.source, str(problem), pid) from None
            item = Skip(raw.source, str(problem), pid)
        yield item


def resolve_id_field(spec: InputSpec) -> str | None:
    """The id column ``spec`` stands for (``None``: the row index); reads the first row when it says auto
    (see :mod:`tokenmill.sources.ids`)."""
    if spec.id_field != AUTO_ID_FIELD:
        return spec.id_field
    row = first_row(spec)
    return AUTO_ID_COLUMN if isinstance(row, dict) and row.get(AUTO_ID_COLUMN) is not None else None


def first_row(spec: InputSpec) -> object:
    """The decoded first row of the whole input (``offset`` and ``limit`` ignored); None for an empty input or a
    first row that is not JSON."""
    whole = spec.model_copy(update={"offset": 0, "limit": 1})
    for _, raw in _rows(whole):
        return raw.value if raw.error is None else None
    return None


def _unique_id(row: dict[str, object], field: str, seen: IdSet) -> str:
    """The row's id from ``field``; a repeated id is a problem of the later row (whose Skip then has no id)."""
    pid = row_id(row, field)
    if not seen.add(pid):
        raise RowProblem(f"duplicate id {pid!r} (an earlier row has the same id; ids must be unique)")
    return pid


def _object(raw: RawRow) -> dict[str, object]:
    if raw.error is not None:
        raise RowProblem(raw.error)
    if not isinstance(raw.value, dict):
        raise RowProblem(f"the row is a JSON {json_type(raw.value)}, not an object")
    return raw.value


def _rows(spec: InputSpec, owns: Callable[[int], bool] | None = None) -> Iterator[tuple[int, RawRow]]:
    """(global row index, row) for every row in the ``offset``/``limit`` window (of the files ``owns``)."""
    if spec.hf is not None:
        yield from read_hf(spec.hf, spec.offset, spec.limit)
        return
    assert spec.path is not None  # InputSpec guarantees exactly one of path and hf
    left = spec.limit
    base = 0  # global index of the current file's first row
    counted = spec.id_field is None or spec.offset > 0 or spec.limit is not None  # global indexes matter
    for position, file in enumerate(resolve_files(spec.path, spec.format)):
        if owns is not None and not owns(position):
            if not counted:
                continue  # another partition's file, and nothing here depends on its size: never opened
            rows = row_count(file, spec)
            end = spec.offset + spec.limit if spec.limit is not None else base + rows
            if left is not None:
                left -= max(0, min(base + rows, end) - max(base, spec.offset))
                if left <= 0:
                    return
            base += rows
            continue
        reader = open_rows(file, max(0, spec.offset - base), spec)
        try:
            while left is None or left > 0:
                try:
                    raw = next(reader)
                except StopIteration as end:
                    base += end.value
                    break
                yield base + raw.pos, raw
                if left is not None:
                    left -= 1
            else:
                return  # the limit is reached
        finally:
            reader.close()
