"""The job spec: input, sampling, retries, partitions, concurrency (its output: config/output.py); reading a job file.

A job file is YAML validated by :class:`JobSpec`; :func:`load_job` turns pydantic's errors into a
:class:`~tokenmill.errors.ConfigError` that names each bad field and how to fix it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.config.base import Model, format_validation_error, normalize_url, read_mapping, set_dotted
from tokenmill.config.monitor import MonitorSpec
from tokenmill.config.output import OutputSpec
from tokenmill.errors import ConfigError

ApiKind = Literal["openai-chat", "openai-completions", "sglang-generate"]


BadRowPolicy = Literal["error", "skip"]


Mapping = Literal["auto", "messages", "conversations", "prompt"]


ConversationTurns = Literal["first", "history", "all"]


ThinkingMode = Literal["on", "off"] | float | None
"""``thinking``: on, off, a share of the prompts in 0..1 (chosen by a hash of the id), or None (nothing sent)."""


ThinkingInline = Literal["stop", "ok"]


THINKING_PROBE_MAX_TOKENS = 256  # the start probe's answer: enough for a thinking model to open (and often close)


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


def backoff(attempt: int, base_s: float, max_s: float) -> float:
    """The wait before retry ``attempt`` (1, 2, ...): ``base_s`` doubling each time, at most ``max_s``."""
    return min(max_s, base_s * 2.0 ** min(max(attempt, 1) - 1, 60))


class RetrySpec(Model):
    """How failures are retried, and when a server is set aside."""

    max_attempts: int = Field(default=8, ge=1, description="Attempts per prompt for transient errors")
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=1800.0, gt=0, description="Per request; long generations take time")
    read_timeout_max_s: float = Field(
        default=7200.0,
        gt=0,
        description="The ceiling a server's read timeout grows to (doubling) when answers take longer than it while "
        "the server runs them (nothing queued); at the ceiling that server runs fewer at once instead",
    )
    abandoned_report_after: int = Field(
        default=3,
        ge=1,
        description="A prompt abandoned on read timeouts this many times is named in the log and the summary",
    )
    max_response_mb: float = Field(
        default=64.0, gt=0, description="A response body larger than this is refused (a broken or hostile server)"
    )
    quarantine_after: int = Field(default=5, ge=1, description="Consecutive failures before quarantine")
    probe_interval_s: float = Field(default=5.0, gt=0, description="How often a quarantined server is probed")
    startup_wait_s: float = Field(
        default=300.0,
        ge=0,
        description="At start, how long the run waits (probing every probe_interval_s) for a first server to "
        "answer its health check; when none has, it exits 2 naming each URL and its error (a mistyped or dead "
        "URL). Once any server has answered, servers that go away are waited for and probed for as long as it "
        "takes",
    )
    stop_grace_s: float = Field(
        default=10.0, ge=0, description="After a stop request, how long requests in flight may finish (then: resume)"
    )

    def backoff_s(self, attempt: int) -> float:
        """The wait before retrying a prompt after its ``attempt``-th try (jitter is the dispatcher's)."""
        return backoff(attempt, self.backoff_base_s, self.backoff_max_s)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * (1 << 20))


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


class JobSpec(Model):
    """A whole generation job."""

    input: InputSpec
    servers: list[str] = Field(default_factory=list, description="Base URLs, e.g. http://10.0.0.1:30000")
    servers_file: str | None = Field(default=None, description="A file with one base URL per line")
    servers_file_poll_s: float = Field(
        default=0.5,
        gt=0,
        description="How often servers_file is re-read during a run: servers added, removed or marked "
        "`# draining` / `# down` by `tokenmill fleet` are followed",
    )
    api: ApiKind = "openai-chat"
    model: str = Field(default="default", description="Model name sent in requests")
    tokenizer: str | None = Field(
        default=None, description="Tokenizer path for client-side chat templates (sglang-generate)"
    )
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    samples: int = Field(
        default=1,
        ge=1,
        description="Answers per prompt: with N > 1 each input row becomes N prompts, {id}_gen0 .. {id}_gen{N-1}, "
        "each recorded exactly once, with a seed of its own (sampling.seed + k when the job sets sampling.seed, "
        "else derived from the id and k); 1 keeps the ids as they are",
    )
    api_key_env: str | None = Field(default=None, description="Name of the env var holding the API key")
    concurrency: int | Literal["auto"] = Field(
        default="auto",
        description="In-flight requests per server: auto learns each server's capacity from its metrics; "
        "a number is the most per server (a server that says what it holds is sent no more than that plus a small "
        "queue, so nothing waits out the read timeout in its queue)",
    )
    control: ControlSpec = Field(default_factory=lambda: ControlSpec())
    output: OutputSpec
    retry: RetrySpec = Field(default_factory=RetrySpec)
    save_token_ids: bool = Field(
        default=False,
        description="Record the prompt and completion token ids as the server produced them (checked against "
        "the first server at start: a server that does not return them is refused, never recorded as null)",
    )
    thinking: ThinkingMode = Field(
        default=None,
        description="The thinking mode sent with every request (chat_template_kwargs.enable_thinking, or the "
        "client-side chat template's enable_thinking): on, off, a share in 0..1 of the prompts with thinking on "
        "(chosen by a hash of the row's id, the same in every run), or null: nothing sent, the model's default "
        "(a switch in sampling.extra_body.chat_template_kwargs.enable_thinking then counts as the mode). Recorded "
        "on every record as `thinking`",
    )
    thinking_inline: ThinkingInline = Field(
        default="stop",
        description="A probe at start, in the job's thinking mode (unset: nothing sent, the model's default), checks "
        "where the reasoning comes back: stop = a run whose server leaves it inline in the answer (<think>... in "
        "content, no reasoning_content) stops, naming --reasoning-parser; ok = inline thinking is intended (e.g. "
        "raw text from a completion API). With thinking: off, any thinking in the answer stops the run",
    )
    regenerate: Literal["first", "all"] | None = Field(
        default=None,
        description="Older spelling of input.conversation_turns (which holds the default): all = every user "
        "turn regenerated; first = one generation per row (input.conversation_turns: first unless it is set)",
    )
    status_interval_s: float = Field(default=10.0, gt=0, description="Status line period off a terminal")
    partitioning: PartitionSpec = Field(
        default_factory=PartitionSpec, description="How a split run divides the input between its partitions"
    )
    monitor: MonitorSpec = Field(
        default_factory=lambda: MonitorSpec(), description="Scrapes, event log, metrics exporter, doctor"
    )

    @field_validator("servers")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [normalize_url(u) for u in v]

    @field_validator("thinking", mode="before")
    @classmethod
    def _thinking(cls, v: Any) -> ThinkingMode:
        return thinking_mode(v)

    def asked_thinking(self) -> ThinkingMode:
        """The thinking mode the job asks for: ``thinking``, else the switch set by hand in
        ``sampling.extra_body.chat_template_kwargs.enable_thinking`` (the two never disagree: refused at load)."""
        if self.thinking is not None:
            return self.thinking
        switch = thinking_switch(self.sampling.extra_body)
        return None if switch is None else ("on" if switch else "off")

    def may_think(self) -> bool:
        """Whether any prompt may be sent with thinking on (the mode, a share above 0, or a row column)."""
        mode = self.asked_thinking()
        return mode == "on" or (isinstance(mode, float) and mode > 0) or self.input.thinking_field is not None

    def thinking_probe_mode(self) -> bool | None:
        """The mode the start probe asks with: on when any prompt may think, off when the job says off (a share of
        0 too), else None (nothing sent: what the model does by default)."""
        if self.may_think():
            return True
        mode = self.asked_thinking()
        return False if mode == "off" or mode == 0.0 else None

    @model_validator(mode="after")
    def _one_thinking_mode(self) -> JobSpec:
        switch = thinking_switch(self.sampling.extra_body)
        if switch is None or self.thinking is None or self.thinking == ("on" if switch else "off"):
            return self
        said = "true" if switch else "false"
        raise ValueError(
            f"thinking: {self.thinking} and sampling.extra_body.chat_template_kwargs.enable_thinking: {said} "
            "disagree: set the mode in one place, the job's thinking (on, off or a share; tokenmill sends it as "
            "chat_template_kwargs.enable_thinking), and remove enable_thinking from extra_body"
        )

    @model_validator(mode="after")
    def _has_servers(self) -> JobSpec:
        if not self.servers and not self.servers_file:
            raise ValueError("give servers (a list of base URLs) or servers_file")
        if self.save_token_ids and self.api == "sglang-generate" and not self.tokenizer:
            raise ValueError(
                "save_token_ids with api: sglang-generate needs a tokenizer: SGLang's /generate returns the "
                "completion's ids but not the prompt's, so tokenmill tokenises the prompt itself and sends "
                "input_ids (set tokenizer to the model's path, or use an openai-* api)"
            )
        client_template = self.api != "openai-chat"
        if (self.asked_thinking() is not None or self.input.thinking_field) and client_template and not self.tokenizer:
            raise ValueError(
                f"thinking with api: {self.api} needs a tokenizer: the mode is passed to the model's chat template, "
                "which this api renders client-side (set tokenizer to the model's path, or use api: openai-chat, "
                "which sends chat_template_kwargs.enable_thinking)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _older_regenerate(cls, data: Any) -> Any:
        """``regenerate`` (the older spelling) read as the input's ``conversation_turns``: a new mapping, nothing
        given is changed."""
        older = data.get("regenerate") if isinstance(data, dict) else None
        inp = data.get("input") if isinstance(data, dict) else None
        if older not in ("all", "first") or not isinstance(inp, dict | InputSpec):
            return data
        given = inp.get("conversation_turns") if isinstance(inp, dict) else None
        is_set = "conversation_turns" in (inp if isinstance(inp, dict) else inp.model_fields_set)
        if isinstance(inp, InputSpec):
            given = inp.conversation_turns if is_set else None
        if older == "all" and given == "history":
            raise ValueError("regenerate: all sends every user turn itself; drop input.conversation_turns: history")
        if older == "first" and is_set:
            return data  # an explicit input.conversation_turns wins, as it always did
        turns = {"conversation_turns": older}
        return {**data, "input": {**inp, **turns} if isinstance(inp, dict) else inp.model_copy(update=turns)}


def parse_job(data: dict[str, Any], where: str = "job spec") -> JobSpec:
    """Validate a job mapping; raises ConfigError naming each bad field."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where)) from exc


def load_job(path: str | Path, overrides: dict[str, Any] | None = None) -> JobSpec:
    """Read a YAML job file, apply dotted-key overrides (``{"output.dir": "x"}``) and validate."""
    p = Path(path)
    data = read_mapping(p, "job file", "job fields (input, servers, output, ...)")
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return parse_job(data, where=str(p))
