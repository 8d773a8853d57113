"""The export's settings: the processes of the token export and how far a tokenizer may count otherwise than the
servers did before it is named."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model


class ExportSpec(Model):
    """``export --format tokens`` and ``inspect --tokens`` (the CLI's options default to these)."""

    workers: int | None = Field(
        default=None,
        ge=1,
        description="Processes that build token rows (None: one per core this process may run on); the rows are "
        "the same, in the same order, for any number",
    )
    usage_slack_tokens: int = Field(
        default=8,
        ge=0,
        description="A rendered count within this many tokens of the server's agrees with it (chat-template "
        "headers and end-of-turn tokens the two may place differently)",
    )
    usage_tolerance: float = Field(
        default=0.10,
        ge=0,
        description="A rendered count within this share of the server's agrees with it (a re-tokenized answer "
        "splits a little otherwise than the model sampled it)",
    )
    usage_max_disagree: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="A tokenizer whose counts disagree with the servers' usage counts on more than this share of "
        "the records compared is named in a warning (an error with --strict): it is likely not the model's",
    )
