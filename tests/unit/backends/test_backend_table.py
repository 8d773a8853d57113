"""The backends' table and what it drives: the job's ``api`` names exactly the registered backends, the command
line offers the same, and what each backend says of itself (who renders the chat template, whether the server
returns the prompt's ids) is what the job's checks and the token export assume."""

from __future__ import annotations

from typing import get_args

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from tokenmill.backends import Backend
from tokenmill.cli import cli
from tokenmill.config import ApiKind, JobSpec
from tokenmill.export.tokens import TEXT_APIS

BASE = {"input": {"path": "p.jsonl"}, "servers": ["http://s"], "output": {"dir": "o"}}


def _valid(**fields: object) -> bool:
    try:
        JobSpec.model_validate({**BASE, **fields})
    except ValidationError:
        return False
    return True


def test_the_job_s_apis_are_the_registered_backends() -> None:
    assert set(get_args(ApiKind)) == set(Backend.registry)
    assert all(cls.path.startswith("/") for cls in Backend.registry.values())


def test_the_command_line_offers_every_api() -> None:
    text = CliRunner().invoke(cli, ["run", "--help"], terminal_width=200).output
    assert all(kind in text for kind in Backend.registry)
    assert "--api" in text


@pytest.mark.parametrize("kind", sorted(Backend.registry))
def test_a_backend_s_facts_are_what_the_job_s_checks_assume(kind: str) -> None:
    cls = Backend.registry[kind]
    assert _valid(api=kind)
    # thinking without a tokenizer: only where the server applies the chat template
    assert _valid(api=kind, thinking=True) == cls.server_template
    # save_token_ids without a tokenizer: only where the server returns the prompt's ids
    assert _valid(api=kind, save_token_ids=True) == cls.prompt_ids
    # a plain-text prompt goes to a text api as it is: no chat template on either side
    assert (kind in TEXT_APIS) == (not cls.server_template)
