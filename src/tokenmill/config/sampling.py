"""What every request asks for: the sampling parameters and the thinking mode.

The thinking mode is the job's ``thinking``, or a switch set by hand in ``sampling.extra_body`` (never both)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tokenmill.config.base import Model

ThinkingMode = Literal["on", "off"] | float | None
"""``thinking``: on, off, a share of the prompts in 0..1 (chosen by a hash of the id), or None (nothing sent)."""


ThinkingInline = Literal["stop", "ok"]


THINKING_PROBE_MAX_TOKENS = 256  # the start probe's answer: enough for a thinking model to open (and often close)
THINKING_PROBE_WAIT_S = 120.0  # the start probe waits this long per server at most; then the run's own requests tell


def thinking_mode(value: Any) -> ThinkingMode:
    """A ``thinking`` value as the job holds it: YAML's ``on``/``off`` (read as booleans), ``on``/``off``, a
    share in 0..1, or None; anything else is a ValueError saying what is accepted."""
    if value is None or value in ("on", "off"):
        return value  # type: ignore[no-any-return]
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float) and 0.0 <= float(value) <= 1.0:
        return float(value)
    raise ValueError(f"thinking must be on, off, a share between 0 and 1, or null (the model's default); got {value!r}")


def thinking_switch(extra_body: dict[str, Any]) -> bool | None:
    """The thinking switch a job sets by hand in ``sampling.extra_body.chat_template_kwargs.enable_thinking`` (None:
    it sets none); anything but true or false there is a ValueError."""
    kwargs = extra_body.get("chat_template_kwargs")
    if not isinstance(kwargs, dict) or kwargs.get("enable_thinking") is None:
        return None
    value = kwargs["enable_thinking"]
    if not isinstance(value, bool):
        raise ValueError(
            f"sampling.extra_body.chat_template_kwargs.enable_thinking must be true or false, got {value!r}; "
            "or leave it out and set the job's thinking: on / off"
        )
    return value


class SamplingSpec(Model):
    """Sampling parameters sent with every request."""

    max_tokens: int = Field(
        default=8192,
        ge=1,
        description="Output limit per request. 8192 by default, for a training corpus: long answers are kept "
        "whole (an answer cut at max_tokens ends mid-sentence); prompt + max_tokens must fit the servers' "
        "context length",
    )
    temperature: float = Field(default=0.7, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None)
    stop: list[str] | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Merged into every request body (e.g. chat_template_kwargs)"
    )

    def as_dict(self) -> dict[str, Any]:
        """The parameters as recorded in each completion (no Nones)."""
        out = {k: v for k, v in self.model_dump().items() if v is not None and k != "extra_body"}
        if self.extra_body:
            out["extra_body"] = self.extra_body
        return out
