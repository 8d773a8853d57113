"""Chat-template masks: a conversation rendered through the model's chat template and tokenised, the loss mask 1
on the assistant turns' tokens (each turn's end-of-turn token included), found from the fast tokenizer's offsets.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter
from typing import Any

from tokenmill.backends.templating import ChatTemplater
from tokenmill.errors import PermanentError
from tokenmill.records import Message

_START, _END = itemgetter(0), itemgetter(1)


def render_masked(templater: ChatTemplater, messages: list[Message], *, last_only: bool) -> tuple[list[int], list[int]]:
    """``messages`` rendered by the chat template and tokenised, the mask 1 on the assistant turns (only the last
    one with ``last_only``, earlier answers then rendered without their reasoning), each turn's end-of-turn token
    included."""
    if last_only:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        messages = [
            {"role": m["role"], "content": m["content"]} if m["role"] == "assistant" and i != last else m
            for i, m in enumerate(messages)
        ]
    text = templater.render_full(messages)
    spans = _spans(templater, messages, text)
    if last_only:
        spans = spans[-1:]
    return _masked(templater, text, spans)


def prompt_masked(templater: ChatTemplater, messages: list[Message]) -> tuple[list[int], list[int]]:
    """A prompt (``messages`` ending with a user turn) rendered with the assistant prefix and tokenised, the mask
    1 on the assistant turns it holds (each with its end-of-turn token)."""
    text = templater.render_full(messages, generation_prompt=True)
    return _masked(templater, text, _spans(templater, messages, text))


def _spans(templater: ChatTemplater, messages: list[Message], text: str) -> list[tuple[int, int]]:
    spans = []
    cursor = 0
    specials = templater.special_tokens
    for i, msg in enumerate(messages):
        if msg["role"] == "assistant":
            spans.append(_assistant_span(templater, messages, i, text, cursor, specials))
            cursor = spans[-1][1]
    return spans


def _masked(templater: ChatTemplater, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    enc = templater.encoding(text)
    ids: list[int] = enc.ids
    mask = encoding_mask(enc, len(ids), spans)
    return ids, mask if mask is not None else span_mask(enc.offsets, spans)


def encoding_mask(enc: Any, n: int, spans: list[tuple[int, int]]) -> list[int] | None:
    """:func:`span_mask` from a fast tokenizer's encoding of ``n`` tokens, asking it for the token of each span's
    first and last character (and their neighbours that share them), so no list of every offset is built; None
    when a span's end characters belong to no token (the caller then tests every token's offsets)."""
    mask = [0] * n
    for start, end in spans:
        if end <= start:
            continue
        first, last = enc.char_to_token(start), enc.char_to_token(end - 1)
        if first is None or last is None or last < first:
            return None
        while first > 0 and enc.token_to_chars(first - 1)[1] > start:  # tokens that share the first character
            first -= 1
        while last + 1 < n and enc.token_to_chars(last + 1)[0] < end:  # or the last one
            last += 1
        mask[first : last + 1] = [1] * (last + 1 - first)
    return mask


def span_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """1 for each token whose characters overlap one of ``spans``. A fast tokenizer's offsets never go back, so
    each span's tokens are one run found by bisection (two searches per span, not a test per token and span);
    checking that they do not go back is two sorts of a sorted list (one C pass each)."""
    if offsets != sorted(offsets) or offsets != sorted(offsets, key=_END):
        return [1 if any(s < end and e > start for start, end in spans) else 0 for s, e in offsets]
    mask = [0] * len(offsets)
    for start, end in spans:
        first = bisect_right(offsets, start, key=_END)  # the first token that ends after the span starts
        stop = bisect_left(offsets, end, key=_START)  # past the last token that starts before the span ends
        if stop > first:
            mask[first:stop] = [1] * (stop - first)
    return mask


def _assistant_span(
    templater: ChatTemplater, messages: list[Message], i: int, text: str, cursor: int, specials: list[str]
) -> tuple[int, int]:
    """The characters of assistant turn ``i`` in ``text``: from the end of its header (the template's generation
    prompt) to the end of its content plus the end-of-turn token that follows."""
    msg = messages[i]
    head = templater.render_full(messages[:i], generation_prompt=True) if i else ""
    if i and text.startswith(head) and len(head) >= cursor:
        start = len(head)
    else:  # the template renders history otherwise than its generation prompt: find the turn's own text
        first = msg.get("reasoning_content") or msg["content"]
        found = text.find(first, cursor) if first else -1
        start = found if found >= 0 else cursor
    content = msg["content"]
    at = text.find(content, start) if content else start
    if at < 0:
        raise PermanentError("the chat template leaves an assistant turn's text out of the rendered conversation")
    end = at + len(content)
    for token in specials:
        if text.startswith(token, end):
            end += len(token)
            break
    return start, end
