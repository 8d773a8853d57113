"""Deterministic pseudo-text and token ids for the simulated server.

One token is about four characters, everywhere: :func:`estimate_tokens` counts a prompt that way for usage
and context checks, and generated text is made of three-letter words joined by spaces, so ``n`` output
tokens always read back as ``n`` tokens. Output token ids map one-to-one onto those words
(:func:`decode`); prompt token ids are a cheap hash of each four-character chunk.

Everything a completion holds (its length, its words) is drawn from a key that hashes the simulator seed
and the prompt content, so the same prompt gets the same answer from every run with the same seed.
"""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

CHARS_PER_TOKEN = 4
EOS_TOKEN_ID = 2
"""Reported as ``matched_stop`` / ``finish_reason.matched`` when a completion ends naturally."""

_CONSONANTS = "bcdfghjklmnprstvwxz"
_VOWELS = "aeiou"
WORDS: tuple[str, ...] = tuple(a + v + b for a in _CONSONANTS for v in _VOWELS for b in _CONSONANTS)
WORD_CHARS = 3  # every word; generated text is words joined by single spaces
OUTPUT_ID_BASE = 1000
"""Output token id of ``WORDS[0]``; ids below it are reserved (EOS, prompt-only ids never collide)."""
VOCAB_SIZE = 32000
_PROMPT_ID_SPAN = VOCAB_SIZE - OUTPUT_ID_BASE

FinishKind = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class Draft:
    """A planned completion: its token ids, their text, why it ended, and what stopped it (a stop string, or
    the EOS token id when it ended naturally; ``None`` at the length limit)."""

    token_ids: list[int]
    text: str
    finish: FinishKind
    matched: str | int | None = None


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at :data:`CHARS_PER_TOKEN` characters each (at least 1)."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def prompt_token_ids(text: str) -> list[int]:
    """Token ids for ``text``: one per four-character chunk, ``len == estimate_tokens(text)``."""
    if not text:
        return [OUTPUT_ID_BASE]
    step = CHARS_PER_TOKEN
    return [
        OUTPUT_ID_BASE + zlib.crc32(text[i : i + step].encode()) % _PROMPT_ID_SPAN for i in range(0, len(text), step)
    ]


def decode(token_ids: Iterable[int]) -> str:
    """The text of output token ids made by :func:`plan_output`."""
    return " ".join(WORDS[(i - OUTPUT_ID_BASE) % len(WORDS)] for i in token_ids)


def content_key(seed: int, prompt: str | Sequence[int], request_seed: int | None = None) -> int:
    """A 64-bit key from the simulator seed, the prompt (text or ids) and an optional per-request seed."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{seed}:{request_seed}:".encode())
    if isinstance(prompt, str):
        h.update(prompt.encode("utf-8", "surrogatepass"))
    else:
        h.update(b"ids:" + ",".join(map(str, prompt)).encode())
    return int.from_bytes(h.digest(), "little")


def draw_length(rng: random.Random, mean: float, sigma: float) -> int:
    """A log-normal length whose mean is ``mean`` (at least 1)."""
    if sigma <= 0:
        return max(1, round(mean))
    mu = math.log(mean) - sigma * sigma / 2
    return max(1, round(rng.lognormvariate(mu, sigma)))


def plan_output(
    key: int, max_new_tokens: int, *, ignore_eos: bool, mean: float, sigma: float, stop: Sequence[str] = ()
) -> Draft:
    """The completion for ``key``: a drawn length capped by ``max_new_tokens`` (then ``finish == "length"``),
    cut at the first stop string as SGLang cuts it (the text ends before the match; the ids keep the token
    that completed it)."""
    rng = random.Random(key)
    natural = draw_length(rng, mean, sigma)
    finish: FinishKind = "length" if ignore_eos or natural >= max_new_tokens else "stop"
    n = max_new_tokens if finish == "length" else natural
    picks = rng.choices(range(len(WORDS)), k=n)
    ids = [OUTPUT_ID_BASE + i for i in picks]
    text = " ".join(WORDS[i] for i in picks)
    cut = _first_stop(text, stop)
    if cut is not None:
        start, end, matched = cut
        # token i is word i with the space before it ([4i-1, 4i+3)): the token that completes the match
        # is the one whose text reaches the match's end
        last = end // (WORD_CHARS + 1)
        return Draft(token_ids=ids[: last + 1], text=text[:start], finish="stop", matched=matched)
    return Draft(token_ids=ids, text=text, finish=finish, matched=None if finish == "length" else EOS_TOKEN_ID)


def _first_stop(text: str, stop: Sequence[str]) -> tuple[int, int, str] | None:
    """The stop string that the generated text completes first: (its start, its end, the string)."""
    best: tuple[int, int, str] | None = None
    for s in stop:
        if not s:
            continue
        at = text.find(s)
        if at >= 0 and (best is None or at + len(s) < best[1]):
            best = (at, at + len(s), s)
    return best


def render_chat(messages: Sequence[dict[str, object]]) -> str:
    """The prompt text of a chat, in a ChatML-like template ending with the assistant's turn."""
    parts = [f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
