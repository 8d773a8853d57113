"""The twin's prefix cache: how many of a prompt's tokens SGLang's radix cache would serve, and what it holds.

SGLang inserts every finished request's prompt and output tokens into its radix tree and serves a new
prompt's longest cached prefix from it, always computing at least the prompt's last token (a repeated
prompt of n tokens is n - 1 cache hits). The tree holds at most the KV pool; its least recently used
sequences are evicted first.

The tree is kept as one hash per cached prefix (a rolling hash of the token ids), each counted once per
sequence that holds it, so a lookup walks the prompt once and stops at the first miss. Memory is about
a hundred bytes per cached token, bounded by ``capacity`` tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

_MASK = (1 << 61) - 1
_BASE = 1_000_003


def _prefix_hashes(tokens: Sequence[int]) -> Iterator[int]:
    """The hash of each prefix of ``tokens``, shortest first."""
    h = 0
    for t in tokens:
        h = (h * _BASE + t + 1) & _MASK
        yield h


class PrefixCache:
    """Longest-prefix matches over the sequences inserted so far, bounded by ``capacity`` tokens (LRU)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._refs: dict[int, int] = {}
        self._sequences: OrderedDict[int, list[int]] = OrderedDict()
        self._held = 0

    def match(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` served from the cache: its longest cached prefix, at most ``len - 1``."""
        hit = 0
        refs = self._refs
        for n, h in enumerate(_prefix_hashes(prompt[: len(prompt) - 1]), start=1):
            if h not in refs:
                break
            hit = n
        return hit

    def insert(self, tokens: Sequence[int]) -> None:
        """Cache a finished request's tokens (prompt then output), evicting the oldest sequences over capacity."""
        if not self.capacity or not tokens:
            return
        hashes = list(_prefix_hashes(tokens[: self.capacity]))
        key = hashes[-1] ^ len(hashes)
        old = self._sequences.pop(key, None)
        if old is not None:  # the same sequence again: refresh it
            self._release(old)
        for h in hashes:
            self._refs[h] = self._refs.get(h, 0) + 1
        self._sequences[key] = hashes
        self._held += len(hashes)
        while self._held > self.capacity and self._sequences:
            _, evicted = self._sequences.popitem(last=False)
            self._release(evicted)

    def _release(self, hashes: list[int]) -> None:
        refs = self._refs
        for h in hashes:
            left = refs[h] - 1
            if left:
                refs[h] = left
            else:
                del refs[h]
        self._held -= len(hashes)

    @property
    def tokens(self) -> int:
        """Tokens held, counted per sequence (shared prefixes once per sequence that holds them)."""
        return self._held
