"""The options several commands take, each with one meaning everywhere, and old spellings kept with a warning.

- ``--servers/-s URL`` (repeatable) and ``--servers-file FILE``: the servers, as base URLs;
- ``--output/-o OUT``: a run's output directory (``output.dir``), the one it writes or the one read from;
- ``--planner-model/-m MODEL`` (a bundled planner model or a ``config.json`` path), ``--gpu/-g`` and
  ``--gpu-file``: what the capacity planner plans for. ``--model`` is the model name sent in requests (``run``);
- ``--max-tokens N`` and ``--ignore-eos``: the requests' kind, what they send (``sampling.max_tokens``, and
  ``sampling.extra_body.ignore_eos: true``), which decides how SGLang admits them;
- ``--job JOB.yaml``: a job file to read settings from; ``--fleet PROFILE.yaml``: a fleet profile;
- ``--json``: the command's result as JSON.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo

F = TypeVar("F", bound=Callable[..., Any])

PLANNER_MODEL_HELP = (
    "The planner's model: a bundled name (e.g. qwen3.6-27b, see `tokenmill plan --list-models`) or a path to a "
    "config.json"
)
GPU_HELP = "GPU name (e.g. rtx-pro-6000, h100, b200; see `tokenmill plan --list-gpus`)"
GPU_FILE_HELP = "YAML file with more GPUs (beside the bundled ones)"


def _apply(fn: F, options: list[Callable[[F], F]]) -> F:
    for option in reversed(options):
        fn = option(fn)
    return fn


def renamed(old: str | tuple[str, ...], new: str, dest: str, **option: Any) -> Callable[[F], F]:
    """Keep the old spelling(s) ``old`` of the option ``new`` (stored in ``dest``) working, hidden from the help,
    with a warning naming the new one; both given with different values is a usage error."""
    hidden = f"renamed_{dest}"
    decls = (old,) if isinstance(old, str) else old
    shown = "/".join(decls)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = kwargs.pop(hidden, None)
            if value is not None and value != ():
                click.echo(f"warning: {shown} is deprecated here, it is now {new}", err=True)
                if kwargs.get(dest) not in (None, ()) and kwargs[dest] != value:
                    raise click.UsageError(f"give {new} (or its old spelling {shown}), not both")
                kwargs[dest] = value
            return fn(*args, **kwargs)

        return click.option(*decls, hidden, hidden=True, default=None, **option)(wrapper)  # type: ignore[return-value]

    return decorate


def server_options(fn: F) -> F:
    """``--servers/-s URL`` (repeatable) and ``--servers-file FILE``."""
    return _apply(
        fn,
        [
            click.option("--servers", "-s", multiple=True, help="Server base URL (repeat)."),
            click.option(
                "--servers-file",
                type=click.Path(exists=True, dir_okay=False),
                help="A servers file: one base URL a line (`# draining` / `# down` marks as the fleet writes them).",
            ),
        ],
    )


def output_option(help: str, exists: bool = False) -> Callable[[F], F]:
    """``--output/-o OUT``: a run's output directory, stored in ``out`` (a local directory: a URL is refused)."""
    instead = "give the run's local output directory (its remote prefix is in the job's output.remote)"
    return click.option("--output", "-o", "out", type=LocalPath(instead, exists=exists, file_okay=False), help=help)


class LocalPath(click.Path):
    """A local path option; a URL is refused before anything else is checked, saying what to do ``instead``."""

    def __init__(self, instead: str, **path: Any) -> None:
        super().__init__(**path)
        self.instead = instead

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from tokenmill.storage.place import is_url
        from tokenmill.storage.store import display_url

        if isinstance(value, str) and is_url(value):
            self.fail(f"{display_url(value)} is a URL, not a local path; {self.instead}", param, ctx)
        return super().convert(value, param, ctx)


def planner_options(
    required: bool = False, model_help: str = PLANNER_MODEL_HELP, gpu_help: str = GPU_HELP
) -> Callable[[F], F]:
    """``--planner-model/-m`` (old spelling ``--model``), ``--gpu/-g`` and ``--gpu-file``, stored in
    ``planner_model``, ``gpu`` and ``gpu_file``; ``required``: the model and the GPU must be given."""

    def decorate(fn: F) -> F:
        if required:
            fn = _required(fn, ("planner_model", "--planner-model"), ("gpu", "--gpu"))
        return _apply(
            fn,
            [
                click.option("--planner-model", "-m", "planner_model", help=model_help),
                renamed("--model", "--planner-model", "planner_model"),
                click.option("--gpu", "-g", help=gpu_help),
                click.option("--gpu-file", type=click.Path(exists=True, dir_okay=False), help=GPU_FILE_HELP),
            ],
        )

    return decorate


def _required(fn: F, *names: tuple[str, str]) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        missing = [flag for dest, flag in names if kwargs.get(dest) is None]
        if missing:
            raise click.UsageError(f"Missing option {' and '.join(missing)}")
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


MAX_TOKENS_HELP = "The requests' output limit, as the job sends it (sampling.max_tokens)"
IGNORE_EOS_HELP = (
    "The requests are sent with ignore_eos (sampling.extra_body.ignore_eos: true): every answer runs to max_tokens, "
    "and SGLang admits a request only when its whole answer fits"
)


def request_kind_options(
    max_tokens_help: str = MAX_TOKENS_HELP, ignore_eos_help: str = IGNORE_EOS_HELP
) -> Callable[[F], F]:
    """``--max-tokens N`` and ``--ignore-eos``, stored in ``max_tokens`` (None: not given) and ``ignore_eos`` (None:
    not given; ``--no-ignore-eos`` says the requests stop at their end of sequence)."""
    return lambda fn: _apply(
        fn,
        [
            click.option("--max-tokens", type=click.IntRange(min=1), help=max_tokens_help),
            click.option("--ignore-eos/--no-ignore-eos", "ignore_eos", default=None, help=ignore_eos_help),
        ],
    )


def job_file_option(help: str) -> Callable[[F], F]:
    """``--job JOB.yaml``, stored in ``job_file``."""
    return click.option("--job", "job_file", type=click.Path(exists=True, dir_okay=False), help=help)


def fleet_file_option(help: str) -> Callable[[F], F]:
    """``--fleet PROFILE.yaml``, stored in ``fleet_file``."""
    return click.option("--fleet", "fleet_file", type=click.Path(exists=True, dir_okay=False), help=help)


def json_option(help: str = "Print JSON.") -> Callable[[F], F]:
    """``--json``, stored in ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


# ---- options generated from the config models (their types, help and defaults stay in tokenmill.config) -------


class NumberOr(click.ParamType):  # type: ignore[type-arg]
    """A number, or one of a few words (``concurrency: auto``): what a field typed ``int | Literal[...]`` takes."""

    name = "number"

    def __init__(self, number: type[int] | type[float], words: list[str]) -> None:
        self.number, self.words = number, words
        self.name = "|".join(["N", *words])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) or value in self.words:
            return value
        try:
            return self.number(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number nor one of {', '.join(self.words)}", param, ctx)


def click_type(annotation: Any) -> tuple[click.ParamType[Any, Any] | None, bool]:
    """(click type, is_flag) for a field annotation; a None type for fields no option offers."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        if len(args) == 1:
            return click_type(args[0])
        numbers = [a for a in args if a in (int, float)]
        words = [str(w) for a in args if typing.get_origin(a) is typing.Literal for w in typing.get_args(a)]
        if len(numbers) == 1 and len(numbers) + sum(typing.get_origin(a) is typing.Literal for a in args) == len(args):
            return NumberOr(numbers[0], words), False
        return None, False
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(a) for a in args]), False
    if annotation is bool:
        return None, True
    simple: dict[Any, click.ParamType[Any, Any]] = {int: click.INT, float: click.FLOAT, str: click.STRING}
    return simple.get(annotation), False


def field_of(model: type[BaseModel], dotted: str) -> FieldInfo:
    """The field ``dotted`` (``input.limit``) of ``model``, through its nested models."""
    head, _, rest = dotted.partition(".")
    field = model.model_fields[head]
    if not rest:
        return field
    nested = field.annotation
    assert isinstance(nested, type) and issubclass(nested, BaseModel), dotted
    return field_of(nested, rest)


def field_option(model: type[BaseModel], dotted: str, *decls: str, help: str | None = None) -> Callable[[F], F]:
    """An option that sets the field ``dotted`` of ``model``: its type (a list repeats the option) and its help
    from the field; it defaults to nothing (the field's own default applies)."""
    field = field_of(model, dotted)
    origin = typing.get_origin(field.annotation)
    multiple = origin is list
    ptype, _ = click_type(typing.get_args(field.annotation)[0] if multiple else field.annotation)
    assert ptype is not None, f"{dotted}: no option type for {field.annotation}"
    text = help or field.description or dotted.replace("_", " ")
    return click.option(*decls, type=ptype, multiple=multiple, default=None, help=f"{text} ({dotted})")
