"""How each server's in-flight target is set (``concurrency: auto``'s controller, a fixed concurrency's ceiling)."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model


class ControlSpec(Model):
    """How each server's in-flight target is set: ``concurrency: auto``'s, and a fixed concurrency's below it."""

    initial: int = Field(default=64, ge=1, description="Target before a server's capacity is known")
    min: int = Field(default=1, ge=1)
    max: int = Field(default=4096, ge=1)
    queue_frac: float = Field(
        default=0.05, ge=0, description="Queue kept above what a server runs, as a fraction of its capacity"
    )
    queue_min: int = Field(default=4, ge=0, description="Smallest queue kept (hides the request round trip)")
    queue_max: int = Field(default=64, ge=0)
    throttle_factor: float = Field(default=0.7, gt=0, lt=1, description="Target multiplier after a 429/503")
    grow_factor: float = Field(
        default=1.25, gt=1, description="Growth per round while a server without a known cap is client-limited"
    )
    oversubscribed: float = Field(
        default=2.0,
        gt=1,
        description="A fixed concurrency above this many times what the servers hold (max running + the queue "
        "above) gets a warning at start: the rest would only wait in the servers' queues",
    )
