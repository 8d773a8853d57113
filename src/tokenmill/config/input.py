"""The job's input: where the prompts come from, how a row becomes a prompt, bad rows, a split run's partitions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tokenmill.config.base import Model

BadRowPolicy = Literal["error", "skip"]


Mapping = Literal["auto", "messages", "conversations", "prompt"]


ConversationTurns = Literal["first", "history", "all"]


class HFInputSpec(Model):
    """A Hugging Face dataset, read with ``datasets`` in streaming mode."""

    dataset: str = Field(description="Dataset id on the Hub, or a local dataset directory")
    config: str | None = Field(default=None, description="Dataset configuration name")
    split: str = Field(default="train", description="Split to read")


AUTO_ID_FIELD = "auto"  # input.id_field: the AUTO_ID_COLUMN when the input has one, else the row index


AUTO_ID_COLUMN = "id"


class InputSpec(Model):
    """Where the prompts come from and how a row becomes a prompt."""

    path: str | None = Field(default=None, description="Local jsonl/json/parquet file, directory or glob")
    hf: HFInputSpec | None = Field(default=None, description="A Hugging Face dataset instead of a local path")
    format: Literal["auto", "jsonl", "json", "parquet"] = "auto"
    mapping: Mapping = Field(default="auto", description="Which column holds the prompt")
    messages_field: str = "messages"
    conversations_field: str = "conversations"
    prompt_field: str = "prompt"
    id_field: str | None = Field(
        default=AUTO_ID_FIELD,
        description="Column with stable ids. auto: the 'id' column when the input's first row has one, else the "
        "row index (the choice is recorded in OUT/job.json); null: always the row index",
    )
    system_prompt: str | None = Field(default=None, description="Prepended as a system message")
    conversation_turns: ConversationTurns = Field(
        default="all",
        description="all: every user turn regenerated in order, each sent with the answers generated before it "
        "(on-policy multi-turn data); first: system + first user turn, one answer; history: everything up to "
        "the last user turn as the prompt, one answer",
    )
    thinking_field: str | None = Field(
        default=None,
        description="Column saying per row whether thinking is on (true/false or on/off); a row without it (or "
        "null there) takes the job's `thinking`",
    )
    offset: int = Field(default=0, ge=0, description="Skip this many rows first (trial runs)")
    limit: int | None = Field(default=None, ge=1, description="Read at most this many rows (trial runs)")
    on_bad_row: BadRowPolicy = Field(default="error", description="error: stop with file:line; skip: record")
    max_skip_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="Under on_bad_row: skip, the run stops (exit 2, naming the first skipped rows with file:line) "
        "once more than this share of the rows read so far were skipped, judged from the moment more than "
        "skips_allowed rows were skipped (so a few bad rows at the start never stop a big job); 1: never stop. "
        "Whatever the share, a run that completed nothing and skipped rows exits 2 without _SUCCESS",
    )
    skips_allowed: int = Field(
        default=10,
        ge=0,
        description="Skipped rows always tolerated before max_skip_share is judged",
    )
    keep_fields: list[str] | Literal["all"] = Field(
        default="all",
        description="The input's own columns recorded with each completion (record field `fields`; `tokenmill "
        "export --keep-fields` carries them into the training file): all (every column but the prompt and the "
        "id), or a list of names ([] for none)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> InputSpec:
        if (self.path is None) == (self.hf is None):
            raise ValueError("give exactly one of input.path (local files) or input.hf (a dataset id)")
        return self


class PartitionSpec(Model):
    """How a split run (``run --partition I/N`` or ``--partitions N``) divides the input between its partitions."""

    by: Literal["auto", "files", "ids"] = Field(
        default="auto",
        description="files: whole input files go to partitions (file i to partition i mod N, in the input's sorted "
        "order), so no partition reads another's files; ids: every partition reads every row and keeps those with "
        "blake2b(id) mod N = its index; auto: files when the input has min_files_per_partition files per "
        "partition or more (a Hugging Face dataset: ids)",
    )
    min_files_per_partition: int = Field(
        default=4,
        ge=1,
        description="With by: auto, the input files per partition from which whole files go to partitions (fewer "
        "files would leave the partitions' shares uneven)",
    )
