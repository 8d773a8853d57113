"""A workload to plan for: how many prompts, their mean lengths, the requests' limit and kind, and what a trainer
with a maximum sequence length would cut of it.

The request kind matters to SGLang's admission (:mod:`tokenmill.planner.admission`): a request sent with
``ignore_eos`` cannot stop early, so its answer runs to ``max_tokens`` and the server holds room for all of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from tokenmill.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Workload:
    """How much to generate: prompt count and mean token lengths (and where the numbers came from)."""

    prompts: int
    input_len: float
    output_len: float
    source: str = "given"
    max_tokens: int | None = None  # the requests' output limit (what admission reserves for); None: output_len
    ignore_eos: bool = False  # every answer runs to its limit, and admission holds room for all of it
    output_sigma: float | None = None  # log-normal sigma of the answer lengths (None: PlannerSpec's)

    def __post_init__(self) -> None:
        if self.prompts < 1 or self.input_len < 1 or self.output_len < 1:
            raise ConfigError("a workload needs at least one prompt and positive input/output lengths")
        if self.max_tokens is not None and self.max_tokens < self.output_len:
            raise ConfigError(f"the mean output ({self.output_len:g}) cannot exceed max_tokens ({self.max_tokens})")
        if self.ignore_eos and self.max_tokens is not None and self.output_len != self.max_tokens:
            raise ConfigError(
                f"with ignore_eos every answer runs to max_tokens ({self.max_tokens}): "
                f"give it as the output length too (not {self.output_len:g})"
            )

    @property
    def limit(self) -> int:
        """The requests' ``max_tokens``: given, else the mean output length rounded up."""
        return self.max_tokens if self.max_tokens is not None else math.ceil(self.output_len)

    @property
    def kind(self) -> str:
        """The request kind, as the plan names it."""
        return "ignore_eos" if self.ignore_eos else "ordinary"

    @property
    def avg_context(self) -> float:
        """Mean tokens a running request holds in steady state: the prompt plus half the output."""
        return self.input_len + self.output_len / 2

    @property
    def output_tokens(self) -> float:
        return self.prompts * self.output_len


def request_workload(
    prompts: int,
    input_len: float,
    output_len: float,
    max_tokens: int | None,
    ignore_eos: bool,
    source: str = "given",
    output_sigma: float | None = None,
) -> Workload:
    """The workload of requests sent with ``max_tokens`` and ``ignore_eos`` (None: the limit is the mean output):
    an ``ignore_eos`` answer runs to its limit, whatever the mean output says; an ordinary one's limit is at least
    its mean output (a mean measured and rounded may pass a limit it cannot exceed)."""
    if max_tokens is None:
        return Workload(prompts, input_len, output_len, source, ignore_eos=ignore_eos, output_sigma=output_sigma)
    if ignore_eos:
        return Workload(prompts, input_len, max_tokens, source, max_tokens=max_tokens, ignore_eos=True)
    limit = max(max_tokens, math.ceil(output_len))
    return Workload(prompts, input_len, output_len, source, max_tokens=limit, output_sigma=output_sigma)


@dataclass(frozen=True, slots=True)
class TrainCut:
    """What a trainer with maximum sequence length ``max_length`` would cut of a workload's records."""

    max_length: int
    records: float  # share of the records longer than max_length
    tokens: float  # share of all tokens (prompt + answer) past max_length
    sigma: float  # the log-normal sigma of the output lengths assumed

    def text(self) -> str:
        return (
            f"train max length {self.max_length:,}: about {self.records * 100:.1f}% of records longer (cut), "
            f"{self.tokens * 100:.1f}% of tokens lost (prompts of the mean length, outputs log-normal, "
            f"sigma {self.sigma:g})"
        )


def train_cut(workload: Workload, max_length: int, sigma: float) -> TrainCut:
    """The share of records and of tokens a trainer with ``max_length`` would cut: every prompt of the workload's
    mean length p, outputs log-normal with the workload's mean m and ``sigma``. With k = max_length - p, a record
    is cut when its output exceeds k, and loses ``E[max(0, O - k)] = m * Phi(d + sigma) - k * Phi(d)``,
    d = (mu - ln k) / sigma, mu = ln m - sigma^2 / 2 (the log-normal's partial expectation)."""
    p, m = workload.input_len, workload.output_len
    room = max_length - p
    if room <= 0:
        return TrainCut(max_length, 1.0, (p + m - max_length) / (p + m), sigma)
    phi = NormalDist().cdf
    mu = math.log(m) - sigma * sigma / 2
    d = (mu - math.log(room)) / sigma
    lost = m * phi(d + sigma) - room * phi(d)
    return TrainCut(max_length, phi(d), max(0.0, lost) / (p + m), sigma)
