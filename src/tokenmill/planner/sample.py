"""Measure a workload's prompt lengths from a sample of a dataset (I/O: reads files, loads a tokenizer).

The rows are read with the job's own input path (``tokenmill.sources``), so a plan sees the prompts the
run will send. With a tokenizer that has a chat template, a conversation is rendered and counted as the
server will count it; without one, lengths are estimated at 4 characters per token and marked so.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.config import InputSpec
from tokenmill.errors import InputError
from tokenmill.records import Prompt

CHARS_PER_TOKEN = 4.0  # rough English average, used only without a tokenizer


@dataclass(frozen=True, slots=True)
class LengthSample:
    """Prompt lengths measured on the first rows of a dataset."""

    rows: int
    mean_tokens: float
    method: str  # "tokenizer <path>" or "estimated at 4 chars/token"
    total_rows: int | None  # rows in the whole input, when it says


def _chars(prompt: Prompt) -> int:
    payload = prompt.payload()
    if isinstance(payload, str):
        return len(payload)
    return sum(len(str(m.get("content") or "")) for m in payload)


def _input(source: str | InputSpec) -> InputSpec:
    return source if isinstance(source, InputSpec) else InputSpec(path=source)


def measure_prompts(source: str | InputSpec, *, rows: int, tokenizer: str | None) -> LengthSample:
    """Mean prompt tokens over the first ``rows`` usable rows of ``source`` (a path, or a job's input with its
    mapping and window; bad rows are skipped)."""
    from tokenmill.sources import iter_prompts

    base = _input(source)
    limit = rows if base.limit is None else min(rows, base.limit)
    spec = base.model_copy(update={"limit": limit, "on_bad_row": "skip"})
    prompts = [p for p in iter_prompts(spec) if isinstance(p, Prompt)]
    if not prompts:
        raise InputError(f"no usable prompts in the first {rows} rows of {base.path}; check the file and its mapping")
    if tokenizer is None:
        mean = sum(_chars(p) for p in prompts) / len(prompts) / CHARS_PER_TOKEN
        method = f"estimated at {CHARS_PER_TOKEN:g} chars/token (pass --tokenizer to count)"
    else:
        from tokenmill.backends.templating import ChatTemplater

        templater = ChatTemplater(tokenizer)
        lengths = []
        for p in prompts:
            payload = p.payload()
            text = payload if isinstance(payload, str) else templater.render(payload)
            lengths.append(len(templater.encode(text)))
        mean = sum(lengths) / len(lengths)
        method = f"counted with the tokenizer in {tokenizer}"
    return LengthSample(len(prompts), max(1.0, mean), method, count_prompts(base))


def count_prompts(source: str | InputSpec) -> int | None:
    """Rows in the whole input (bad ones included; a job's input: in its offset/limit window), or None when the
    input does not say."""
    from tokenmill.sources import count_rows

    return count_rows(_input(source).model_copy(update={"on_bad_row": "skip"}))
