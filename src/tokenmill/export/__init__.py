"""The export: a job's live completions as training data, in the formats of one table (``export/formats.py``).

``write`` runs an export (filters, counts, the writers), ``rows`` builds the one row a record exports as and
``formats`` holds the table every format is a row of; ``conversation`` is the conversation a record holds;
``tokens``, ``masks``, ``usage`` and ``parallel`` build the pre-tokenized rows of ``--format tokens`` (on every
core, checked against the servers' token counts); ``roundtrip`` is ``inspect --tokens``; ``grouped`` gathers a
prompt's samples into one row.
"""

from __future__ import annotations

from tokenmill.export.formats import FORMATS, NAMES, Format, format_of
from tokenmill.export.write import DROP_REASONS, ExportCounts, ExportOptions, counts_path, export, to_row

__all__ = [
    "DROP_REASONS",
    "FORMATS",
    "NAMES",
    "ExportCounts",
    "ExportOptions",
    "Format",
    "counts_path",
    "export",
    "format_of",
    "to_row",
]
