"""Streaming readers for local files: JSON lines (optionally gzipped), JSON and Parquet.

Each reader is a generator over one file that yields :class:`RawRow` from a start position on and returns
the number of rows the file holds, so the caller can number rows across files and apply ``offset``
without decoding what it skips. Nothing reads a whole file into memory.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from tokenmill.config import AUTO_ID_COLUMN, AUTO_ID_FIELD, InputSpec
from tokenmill.errors import InputError
from tokenmill.sources.files import InputFile
from tokenmill.sources.jsonarray import read_json_array
from tokenmill.sources.mapping import mapping_fields
from tokenmill.sources.rows import RawRow, RowReader, decode_json_line, open_binary

_BOM = b"\xef\xbb\xbf"
_PARQUET_BATCH_ROWS = 1024
# Errors a damaged file raises while it is read (truncated or corrupt gzip, I/O errors).
_READ_ERRORS = (OSError, EOFError, zlib.error)


def open_rows(file: InputFile, start: int, spec: InputSpec) -> RowReader:
    """The reader for ``file``, yielding its rows from position ``start`` on."""
    if file.format == "parquet":
        return read_parquet(file.path, start, spec)
    if file.format == "json" and _starts_with_bracket(file.path):
        return read_json_array(file.path, start)
    return read_jsonl(file.path, start)  # .json files may also hold JSON lines


def row_count(file: InputFile, spec: InputSpec) -> int:
    """How many rows ``file`` holds, without decoding them (JSON lines are counted, Parquet from its metadata; a
    JSON array is parsed)."""
    reader = open_rows(file, 1 << 62, spec)  # starts past its end: yields nothing, returns the count
    while True:
        try:
            next(reader)
        except StopIteration as end:
            return int(end.value)


def read_jsonl(path: Path, start: int) -> RowReader:
    """Rows of a JSON-lines file, one per non-blank line; lines count from 1 in row sources."""
    name = str(path)
    pos = 0
    lineno = 0
    with open_binary(path) as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if lineno == 1 and line.startswith(_BOM):
                    line = line[len(_BOM) :]
                if line.isspace():
                    continue
                if pos >= start:
                    yield decode_json_line(line, pos, f"{name}:{lineno}")
                pos += 1
        except _READ_ERRORS as exc:
            raise InputError(
                f"{name}:{lineno + 1}: the file cannot be read past this line ({exc}); "
                "it may be truncated or corrupt; re-create it"
            ) from exc
    return pos


def _starts_with_bracket(path: Path) -> bool:
    """Whether a .json file holds one JSON array (rather than JSON lines)."""
    with open_binary(path) as fh:
        try:
            while chunk := fh.read(4096):
                stripped = chunk.lstrip().removeprefix(_BOM).lstrip()
                if stripped:
                    return stripped.startswith(b"[")
        except _READ_ERRORS as exc:
            raise InputError(f"{path}: cannot be read ({exc}); it may be corrupt; re-create it") from exc
    return False


def read_parquet(path: Path, start: int, spec: InputSpec) -> RowReader:
    """Rows of a Parquet file in batches; whole row groups before ``start`` are not read at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = str(path)
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{name} is not a readable Parquet file ({exc}); check the file or input.format") from exc
    columns = parquet_columns(name, list(pf.schema_arrow.names), spec)
    meta = pf.metadata
    group, pos = 0, 0
    while group < meta.num_row_groups and pos + meta.row_group(group).num_rows <= start:
        pos += meta.row_group(group).num_rows
        group += 1
    groups = list(range(group, meta.num_row_groups))
    try:
        batches = pf.iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=groups, columns=columns)
        for batch in batches:
            for row in batch.to_pylist():
                if pos >= start:
                    yield RawRow(pos, f"{name}:row {pos}", row)
                pos += 1
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{name}:row {pos}: the file cannot be read past this row ({exc}); re-create it") from exc
    return int(meta.num_rows)


def parquet_columns(name: str, names: list[str], spec: InputSpec) -> list[str] | None:
    """Columns to read (None = all); raises InputError when the schema lacks what the mapping needs.

    Chat rows keep the whole original row in ``Prompt.meta`` for export, so every column is read for
    them; plain prompt rows need only the prompt and id columns.
    """
    fields = mapping_fields(spec)
    wanted: dict[str, str] = {}  # column -> the option that names it
    if spec.id_field == AUTO_ID_FIELD:  # deciding where ids come from: read the id column if there is one
        if AUTO_ID_COLUMN in names:
            wanted[AUTO_ID_COLUMN] = "id_field"
    elif spec.id_field is not None:
        wanted[spec.id_field] = "id_field"
    if spec.mapping == "auto":
        present = [f for f in fields.values() if f in names]
        if not present:
            raise InputError(
                f"{name} has none of the columns {', '.join(map(repr, fields.values()))} (it has: {', '.join(names)}); "
                "set input.mapping and input.messages_field / conversations_field / prompt_field"
            )
        chat = present[0] != spec.prompt_field
    else:
        wanted[fields[spec.mapping]] = f"{spec.mapping}_field"
        chat = spec.mapping != "prompt"
    for column, option in wanted.items():
        if column not in names:
            raise InputError(
                f"{name} has no column {column!r} (it has: {', '.join(names)}); set input.{option} to one of them"
            )
    if chat:
        return None
    return list(dict.fromkeys([spec.prompt_field, *wanted]))
