"""The job spec: servers, API, the job's parts (a module each in config/), the rules across them; reading a job file.

The parts: input and partitions (config/input.py), sampling and the thinking mode (sampling.py), retries
(retry.py), each server's in-flight target (control.py), output (output.py), monitor (monitor.py).

A job file is YAML validated by :class:`JobSpec`; :func:`load_job` turns pydantic's errors into a
:class:`~tokenmill.errors.ConfigError` that names each bad field and how to fix it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.config.base import Model, format_validation_error, normalize_url, read_mapping, set_dotted
from tokenmill.config.control import ControlSpec
from tokenmill.config.input import InputSpec, PartitionSpec
from tokenmill.config.monitor import MonitorSpec
from tokenmill.config.output import OutputSpec
from tokenmill.config.retry import RetrySpec
from tokenmill.config.sampling import SamplingSpec, ThinkingInline, ThinkingMode, thinking_mode, thinking_switch
from tokenmill.errors import ConfigError

ApiKind = Literal["openai-chat", "openai-completions", "sglang-generate"]


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
