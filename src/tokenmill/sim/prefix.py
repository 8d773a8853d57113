"""The twin's prefix cache: how many of a prompt's tokens SGLang's radix cache would serve, and what it holds.

As SGLang 0.5.23 does (tests/conformance pins it on real servers): a request's prompt enters the radix tree
after its prefill, and its prompt and output (all but the last generated token) when it finishes; a new
prompt is served its longest cached prefix, always computing at least its last token. A dense model resumes
from any cached token, so a repeated prompt of n tokens is n - 1 hits. A hybrid model must also resume its
recurrent state, which the tree keeps only where a cached sequence ended (``no_buffer``: the end of a prompt
and the end of a finished request): a repeated prompt is no hit, a prompt that extends a cached prompt or a
finished conversation hits all of it. The tree holds at most the KV pool; its least recently used sequences
are evicted first.

The tree is kept as one hash per cached prefix (a rolling hash of the token ids), each counted once per
sequence that holds it, so a lookup walks the prompt once and stops at the first miss; the prefixes where a
state was kept are a second set. Memory is about a hundred bytes per cached token, bounded by ``capacity``
tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

_MASK = (1 << 61) - 1
_BASE = 1_000_003


def _prefix_hashes(tokens: Sequence[int]) -> Iterator[int]:
    """The hash of each prefix of ``tokens``, shortest first."""
    h = 0
    for t in tokens:
        h = (h * _BASE + t + 1) & _MASK
        yield h


class PrefixCache:
    """Longest-prefix matches over the sequences inserted so far, bounded by ``capacity`` tokens (LRU).

    ``states=True`` (a hybrid model): a match must end where a recurrent state was kept.
    """

    def __init__(self, capacity: int, *, states: bool = False) -> None:
        self.capacity = max(0, capacity)
        self.needs_state = states
        self._refs: dict[int, int] = {}
        self._states: dict[int, int] = {}  # prefixes that end where a state was kept
        self._sequences: OrderedDict[int, tuple[list[int], int]] = OrderedDict()
        self._held = 0
        self._locked: dict[int, int] = {}  # prefixes a running request holds (not evictable)

    def match(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` served from the cache: its longest cached (resumable) prefix, at most ``len - 1``."""
        hit = 0
        refs, states = self._refs, self._states
        for n, h in enumerate(_prefix_hashes(prompt[: len(prompt) - 1]), start=1):
            if h not in refs:
                break
            if not self.needs_state or h in states:
                hit = n
        return hit

    def insert_prompt(self, prompt: Sequence[int]) -> None:
        """Cache a prompt once it is prefilled (a state is kept at its end)."""
        self._insert(prompt)

    def insert_finished(self, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Cache a finished request: its prompt and all but its last output token (a state is kept at the end)."""
        self._insert([*prompt, *output[:-1]])

    def _insert(self, tokens: Sequence[int]) -> None:
        if not self.capacity or not tokens:
            return
        hashes = list(_prefix_hashes(tokens[: self.capacity]))
        key = hashes[-1] ^ len(hashes)
        old = self._sequences.pop(key, None)
        if old is not None:  # the same sequence again: refresh it
            self._release(*old)
        for h in hashes:
            self._refs[h] = self._refs.get(h, 0) + 1
        end = hashes[-1]
        self._states[end] = self._states.get(end, 0) + 1
        self._sequences[key] = (hashes, end)
        self._held += len(hashes)
        while self._held > self.capacity and self._sequences:
            _, evicted = self._sequences.popitem(last=False)
            self._release(*evicted)

    def _release(self, hashes: list[int], end: int) -> None:
        _decrement(self._refs, hashes)
        _decrement(self._states, (end,))
        self._held -= len(hashes)

    def clear(self) -> None:
        """Forget every cached sequence (SGLang's ``/flush_cache``; nothing may be running)."""
        self._refs.clear()
        self._states.clear()
        self._sequences.clear()
        self._locked.clear()
        self._held = 0

    def lock(self, prompt: Sequence[int]) -> None:
        """A running request holds its cached prompt: those tokens are in use, not evictable."""
        for h in _prefix_hashes(prompt[: self.capacity]):
            self._locked[h] = self._locked.get(h, 0) + 1

    def unlock(self, prompt: Sequence[int]) -> None:
        """The request holding ``prompt`` is gone (finished, retracted, aborted)."""
        _decrement(self._locked, (h for h in _prefix_hashes(prompt[: self.capacity]) if h in self._locked))

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens no running request holds: SGLang counts them as evictable, free for admission."""
        return max(0, len(self._refs) - sum(1 for h in self._locked if h in self._refs))

    @property
    def states(self) -> int:
        """Recurrent states the tree keeps (one per cached sequence end)."""
        return len(self._states)

    @property
    def tokens(self) -> int:
        """Tokens held, counted per sequence (shared prefixes once per sequence that holds them)."""
        return self._held


def _decrement(counts: dict[int, int], keys: Iterable[int]) -> None:
    for k in keys:
        left = counts[k] - 1
        if left:
            counts[k] = left
        else:
            del counts[k]
