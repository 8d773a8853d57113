"""Chunked prefill as SGLang runs it: the prompt tokens of the requests being prefilled are computed
``--chunked-prefill-size`` at a time, in order, one prefill batch (and one ``Prefill batch`` log line) per chunk.

SGLang's ``PrefillAdder`` fills a batch while its chunk budget lasts and cuts the last request there (the
``chunked_req``); the next iteration continues that request first, then takes new requests with what is left of the
budget. So a 1,000-token prompt with a chunk size of 256 is four prefill batches of 256 + 256 + 256 + 232 tokens,
and two 300-token prompts are 256, then 44 + 212, then 88. A request's first token comes at the end of the chunk
that holds its last prompt token. Without a chunk size (``None``) a batch is one chunk. With
``--enable-mixed-chunk`` the running requests decode in the same batch, one token each taken from its budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenmill.sim.requests import SimRequest


@dataclass
class Chunk:
    """One prefill batch of a chunked prefill."""

    fills: list[int] = field(default_factory=list)  # prompt tokens computed for each request in the batch
    cached: int = 0  # prompt tokens the prefix cache served the requests that start in this batch
    completed: list[SimRequest] = field(default_factory=list)  # requests whose whole prompt is done at its end


@dataclass
class _Pending:
    request: SimRequest
    left: int
    cached: int
    started: bool = False


class ChunkQueue:
    """The prompt tokens still to compute, request by request, cut into chunks of at most ``size`` tokens."""

    def __init__(self, size: int | None) -> None:
        self.size = size if size is not None and size > 0 else None
        self._pending: deque[_Pending] = deque()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, request: SimRequest, fill: int, cached: int) -> None:
        """Queue ``fill`` prompt tokens of ``request`` (``cached`` more were served by the prefix cache)."""
        self._pending.append(_Pending(request, max(fill, 0), cached))

    def pending(self) -> set[int]:
        """The ids of the requests with prompt tokens still to compute."""
        return {id(item.request) for item in self._pending}

    def next(self, decode_rows: int = 0) -> Chunk:
        """The next prefill batch: pending tokens in order while the chunk budget lasts (every request at least
        once: a whole prefix hit still computes its last token in SGLang, priced here as none). ``decode_rows``
        running requests decoding in the same batch (``--enable-mixed-chunk``) take one token each of the budget,
        as SGLang's ``PrefillAdder`` takes them (at least one prompt token is left to the batch)."""
        chunk = Chunk()
        budget = None if self.size is None else max(1, self.size - decode_rows)
        while self._pending and (budget is None or budget > 0):
            item = self._pending[0]
            take = item.left if budget is None else min(item.left, budget)
            if not item.started:
                item.started = True
                chunk.cached += item.cached
            chunk.fills.append(take)
            item.left -= take
            if budget is not None:
                budget -= take
            if item.left == 0:
                self._pending.popleft()
                chunk.completed.append(item.request)
        return chunk

    def clear(self) -> None:
        self._pending.clear()
