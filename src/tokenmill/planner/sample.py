"""Measure a workload's prompt lengths from a sample of a dataset (I/O: reads files, loads a tokenizer).

The rows are read with the job's own input path (``tokenmill.sources``), so a plan sees the prompts the
run will send. With a tokenizer that has a chat template, a conversation is rendered and counted as the
server will count it; without one, lengths are estimated at 4 characters per token and marked so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.config import InputSpec
from tokenmill.errors import InputError
from tokenmill.records import Message, Prompt

CHARS_PER_TOKEN = 4.0  # rough English average, used only without a tokenizer


@dataclass(frozen=True, slots=True)
class LengthSample:
    """Prompt lengths measured on the first rows of a dataset, per request: a row regenerated turn by turn
    (``input.conversation_turns: all``) sends one request per user turn, each with the turns before it and their
    generated answers as history."""

    rows: int
    mean_tokens: float  # a request's prompt, without the generated answers in its history
    method: str  # "tokenizer <path>" or "estimated at 4 chars/token"
    total_rows: int | None  # rows in the whole input, when it says
    requests_per_row: float = 1.0  # mean user turns answered per row (1 unless turns are regenerated)
    history_answers: float = 0.0  # mean generated answers in a request's history (each about the mean output)

    def input_len(self, output_len: float) -> float:
        """A request's mean prompt tokens, its history's generated answers counted at ``output_len`` each."""
        return self.mean_tokens + self.history_answers * output_len


def _chars(payload: str | list[Message]) -> int:
    if isinstance(payload, str):
        return len(payload)
    return sum(len(str(m.get("content") or "")) for m in payload)


def _counter(tokenizer: str | None) -> tuple[Callable[[str | list[Message]], float], str]:
    """How a prompt (text, or a conversation: rendered through the chat template) is counted, and the words for it."""
    if tokenizer is None:
        return lambda payload: _chars(payload) / CHARS_PER_TOKEN, (
            f"estimated at {CHARS_PER_TOKEN:g} chars/token (pass --tokenizer to count)"
        )
    from tokenmill.backends.templating import ChatTemplater

    templater = ChatTemplater(tokenizer)

    def count(payload: str | list[Message]) -> float:
        return len(templater.encode(payload if isinstance(payload, str) else templater.render(payload)))

    return count, f"counted with the tokenizer in {tokenizer}"


def _input(source: str | InputSpec) -> InputSpec:
    return source if isinstance(source, InputSpec) else InputSpec(path=source)


def measure_prompts(source: str | InputSpec, *, rows: int, tokenizer: str | None) -> LengthSample:
    """Mean prompt tokens per request over the first ``rows`` usable rows of ``source`` (a path, or a job's input
    with its mapping, window and conversation_turns; bad rows are skipped)."""
    from tokenmill.sources import iter_prompts

    base = _input(source)
    limit = rows if base.limit is None else min(rows, base.limit)
    spec = base.model_copy(update={"limit": limit, "on_bad_row": "skip"})
    prompts = [p for p in iter_prompts(spec) if isinstance(p, Prompt)]
    if not prompts:
        raise InputError(f"no usable prompts in the first {rows} rows of {base.path}; check the file and its mapping")
    count, method = _counter(tokenizer)
    lengths: list[float] = []
    answers = 0
    for p in prompts:
        length = count(p.payload())
        lengths.append(length)
        for k, followup in enumerate(p.followups or (), start=1):  # turn k: k answers before it in its history
            length += count(str(followup.get("content") or ""))
            lengths.append(length)
            answers += k
    return LengthSample(
        rows=len(prompts),
        mean_tokens=max(1.0, sum(lengths) / len(lengths)),
        method=method,
        total_rows=count_prompts(base),
        requests_per_row=len(lengths) / len(prompts),
        history_answers=answers / len(lengths),
    )


def count_prompts(source: str | InputSpec) -> int | None:
    """Rows in the whole input (bad ones included; a job's input: in its offset/limit window), or None when the
    input does not say."""
    from tokenmill.sources import count_rows

    return count_rows(_input(source).model_copy(update={"on_bad_row": "skip"}))
