"""Which requests the simulated server mistreats, and how often.

Each generation request draws one number from a generator seeded by ``FaultSpec.seed``; the fault rates
are consecutive bands of [0, 1), so at most one fault hits a request and each kind occurs at its rate.
The draws are reproducible for a given arrival order. What each fault does on the wire is up to the
server (:mod:`tokenmill.sim.server`):

=============  ===================================================================
``error``      HTTP 500 with an SGLang-style error body
``rate_limit`` HTTP 429 with ``Retry-After: 1``
``stall``      the request hangs for ``stall_s`` seconds, then is served normally
``drop``       the connection is closed without any response
``malformed``  HTTP 200 whose JSON body is cut in half
=============  ===================================================================
"""

from __future__ import annotations

import random
from typing import Literal, get_args

from tokenmill.config import FaultSpec
from tokenmill.errors import ConfigError

FaultKind = Literal["error", "rate_limit", "stall", "drop", "malformed"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class FaultInjector:
    """Seeded per-request fault draws; :meth:`update` swaps the spec while the server runs."""

    def __init__(self, spec: FaultSpec) -> None:
        self.counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.spec = spec
        self._bands: list[tuple[float, FaultKind]] = []
        self._rng = random.Random()
        self.update(spec)

    def update(self, spec: FaultSpec) -> None:
        """Use ``spec`` from now on (reseeding the draws); raises ConfigError if the rates sum past 1."""
        rates: dict[FaultKind, float] = {
            "error": spec.error_rate,
            "rate_limit": spec.rate_limit_rate,
            "stall": spec.stall_rate,
            "drop": spec.drop_rate,
            "malformed": spec.malformed_rate,
        }
        total = sum(rates.values())
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"fault rates add up to {total:g}; each is a fraction of requests and together they must "
                "not exceed 1 (lower error_rate, rate_limit_rate, stall_rate, drop_rate or malformed_rate)"
            )
        bands, edge = [], 0.0
        for kind, rate in rates.items():
            if rate > 0:
                edge += rate
                bands.append((edge, kind))
        self.spec = spec
        self._bands = bands
        self._rng = random.Random(spec.seed)

    def draw(self) -> FaultKind | None:
        """The fault for the next request, if any (and count it)."""
        if not self._bands:
            return None
        u = self._rng.random()
        for edge, kind in self._bands:
            if u < edge:
                self.counts[kind] += 1
                return kind
        return None
