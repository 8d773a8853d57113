"""Which proposed changes alter the model's outputs: one table, read by the doctor's reports and by autotune.

A drafter corpus is worth what it is because its answers are the target model's own: a change that rounds the
weights, the cached keys and values or the recurrent state, or that lets a draft model's tokens through a relaxed
check, gives a different model's answers. Such a change is listed apart with :data:`WARNING` in ``tokenmill
doctor``, the run's log and its JSON, and autotune tries it only when the profile's
``autotune.allow_output_changes`` names it. The other changes move how the server schedules and splits its memory;
the model computes the same thing. A flag the table does not name counts as changing the outputs (the safe side).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlagEffect:
    """One flag (or client setting): whether changing it changes the model's outputs, and why."""

    name: str  # without the leading dashes
    changes_outputs: bool
    why: str


FLAG_EFFECTS: tuple[FlagEffect, ...] = (
    FlagEffect("quantization", True, "the weights are rounded (fp8, int4, ...)"),
    FlagEffect("kv-cache-dtype", True, "the cached keys and values are rounded (fp8)"),
    FlagEffect("mamba-ssm-dtype", True, "the recurrent (SSM) state is kept at lower precision"),
    FlagEffect("dtype", True, "the model computes at another precision"),
    FlagEffect("speculative-accept-threshold-single", True, "a relaxed check lets draft tokens through"),
    FlagEffect("speculative-accept-threshold-acc", True, "a relaxed check lets draft tokens through"),
    FlagEffect("max-running-requests", False, "scheduling: how many requests run at once"),
    FlagEffect("mem-fraction-static", False, "memory split: how much memory the pools get"),
    FlagEffect("disable-radix-cache", False, "the prefix cache: reuse of computed prompts, not what is computed"),
    FlagEffect("mamba-radix-cache-strategy", False, "how the prefix cache keeps recurrent states"),
    FlagEffect("mamba-scheduler-strategy", False, "how the prefix cache keeps recurrent states"),
    FlagEffect("mamba-full-memory-ratio", False, "memory split between the state and KV pools"),
    FlagEffect("max-mamba-cache-size", False, "memory split: state slots"),
    FlagEffect("schedule-conservativeness", False, "scheduling: how eagerly requests are admitted"),
    FlagEffect("schedule-policy", False, "scheduling: the order requests are admitted in"),
    FlagEffect("chunked-prefill-size", False, "scheduling: prompts prefilled in chunks of this size"),
    FlagEffect("enable-mixed-chunk", False, "scheduling: decode steps run beside prefill chunks"),
    FlagEffect("disable-overlap-schedule", False, "scheduling: CPU work overlapped with the GPU's"),
    FlagEffect("cuda-graph-max-bs", False, "captured decode batch sizes"),
    FlagEffect("cuda-graph-max-bs-decode", False, "captured decode batch sizes"),
    FlagEffect("max-total-tokens", False, "memory split: KV pool tokens"),
    FlagEffect("page-size", False, "KV pool layout"),
    FlagEffect("speculative-algorithm", False, "speculative decoding verified against the target: its tokens"),
    FlagEffect("speculative-num-steps", False, "speculative decoding verified against the target: its tokens"),
    FlagEffect("speculative-eagle-topk", False, "speculative decoding verified against the target: its tokens"),
    FlagEffect("speculative-num-draft-tokens", False, "speculative decoding verified against the target: its tokens"),
    FlagEffect("concurrency", False, "the client: requests in flight per server"),
    FlagEffect("max-tokens", False, "the client: the output limit (answers longer than it are cut)"),
    FlagEffect("api", False, "the client: which API carries the same request"),
)
"""Every flag the doctor proposes has a row (``tests/unit/doctor/test_outputs.py`` holds it so)."""

EFFECTS = {e.name: e for e in FLAG_EFFECTS}
WARNING = "changes the model's outputs: the corpus would no longer be the target model's own answers"
HEADER = "these change the model's outputs (the corpus would no longer be the target model's own answers)"


def flags_of(change: str) -> list[str]:
    """The flag names of a change as typed (``--kv-cache-dtype fp8_e4m3`` -> ``kv-cache-dtype``)."""
    return [w[2:].partition("=")[0] for w in change.split() if w.startswith("--") and len(w) > 2]


def output_flags(change: str) -> list[str]:
    """The flags of ``change`` that change the model's outputs (a flag the table does not know counts)."""
    return [f for f in flags_of(change) if f not in EFFECTS or EFFECTS[f].changes_outputs]


def changes_outputs(change: str) -> bool:
    """Whether ``change`` (launch flags or a client setting, as typed; an operator's action has no flags) changes the
    model's outputs."""
    return bool(output_flags(change))


def why(change: str) -> str:
    """What ``change`` does to the outputs, in words: the reason of each output-changing flag, else of the first."""
    names = output_flags(change) or flags_of(change)
    reasons = [EFFECTS[n].why if n in EFFECTS else f"--{n}: not in tokenmill's table" for n in names]
    return "; ".join(dict.fromkeys(reasons))
