"""The input side: stream prompts with stable ids from local files or a Hugging Face dataset.

``iter_prompts(spec)`` is the one entry point; ``prompts`` describes a row's way through. Modules:
``files`` (paths, directories, globs → sorted files), ``rows``/``readers``/``jsonarray``/``hf`` (decoding),
``mapping`` (row → Prompt), ``idset`` (duplicate ids), ``count`` (row totals for progress displays).
"""

from __future__ import annotations

from tokenmill.sources.count import count_rows
from tokenmill.sources.files import sample_dataset_path
from tokenmill.sources.prompts import iter_prompts

__all__ = ["count_rows", "iter_prompts", "sample_dataset_path"]
