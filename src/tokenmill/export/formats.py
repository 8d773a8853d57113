"""The export formats as one table: each row's name, file extension, writer, whether ``--samples grouped`` may
group it, and what a row holds.

The CLI's ``--format`` choices, the default file name (``export.<name>.<ext>``), the writer the export runs, the
grouped check and the docs' table (``scripts/gen_tables.py``, docs/quality.md) are all read from :data:`FORMATS`;
a new format is a row here (and its shape in :mod:`tokenmill.export.rows` or a writer in
:mod:`tokenmill.export.write`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tokenmill.errors import ConfigError
from tokenmill.export import rows

# lines: one JSON line per record, its row's shape; tokens: the token rows (tokenmill.export.tokens, on every
# core); parquet: one parquet file of the table's columns; dataset: a Hugging Face dataset directory of them
Writer = Literal["lines", "tokens", "parquet", "dataset"]


@dataclass(frozen=True, slots=True)
class Format:
    """One export format."""

    name: str
    ext: str  # the default export's extension: export.<name>.<ext>
    writer: Writer
    groupable: bool  # --samples grouped may group its rows (one row per prompt, its answers in a list)
    docs: str  # what one row holds (the docs' table)
    shape: Callable[[rows.Row], rows.Row] | None = None  # lines and table writers: the row from the record's

    @property
    def default_name(self) -> str:
        """The file (or directory) an export writes when no ``--to`` is given."""
        return f"export.{self.name}.{self.ext}"


FORMATS: tuple[Format, ...] = (
    Format(
        "sharegpt", "jsonl", "lines", True,
        '`{"id", "conversations": [{"from": "system"\\|"human"\\|"gpt", "value"}]}`', rows.sharegpt,
    ),
    Format("openai-messages", "jsonl", "lines", True, '`{"id", "messages": [{"role", "content"}]}`',
           rows.openai_messages),
    Format(
        "specforge", "jsonl", "lines", True,
        '`{"id", "conversations": [{"role", "content"}]}`: what SpecForge\'s training loader and its regeneration '
        "script read and write (system turns first, then user/assistant strictly alternating)",
        rows.specforge,
    ),
    Format(
        "tokens", "jsonl", "tokens", False,
        '`{"id", "input_ids", "loss_mask", "token_source", "finish_reason"}`: pre-tokenized rows (SpecForge '
        "`data.prompts_path`, vLLM speculators)",
    ),
    Format(
        "parquet", "parquet", "parquet", False,
        "one file: id, messages (role/content/reasoning_content), finish_reason, token counts, ids", rows.table,
    ),
    Format(
        "hf", "hf", "dataset", False,
        "a Hugging Face dataset directory (`datasets.load_from_disk`) with the parquet columns", rows.table,
    ),
)  # fmt: skip
NAMES: tuple[str, ...] = tuple(f.name for f in FORMATS)
BY_NAME: dict[str, Format] = {f.name: f for f in FORMATS}


def format_of(name: str) -> Format:
    """The format called ``name``; a :class:`ConfigError` naming the choices for any other."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown export format {name!r}; choose one of {', '.join(NAMES)}") from None


def grouped_formats() -> list[str]:
    """The formats ``--samples grouped`` may group."""
    return [f.name for f in FORMATS if f.groupable]
