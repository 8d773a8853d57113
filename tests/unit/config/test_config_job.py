"""The job spec's validators only check and derive: nothing given to them is changed in place."""

from __future__ import annotations

import pytest

from tokenmill.config import InputSpec, JobSpec, parse_job
from tokenmill.errors import ConfigError

BASE = {"servers": ["http://127.0.0.1:9"], "output": {"dir": "out"}}


def test_the_older_regenerate_spelling_leaves_the_input_it_was_given_alone() -> None:
    given = InputSpec(path="x.jsonl", conversation_turns="first")
    job = JobSpec.model_validate({**BASE, "input": given, "regenerate": "all"})
    assert job.input.conversation_turns == "all"
    assert given.conversation_turns == "first", "the caller's input spec is not rewritten"


def test_the_older_regenerate_spelling_still_means_what_it_did() -> None:
    files = {**BASE, "input": {"path": "x.jsonl"}}
    assert parse_job({**files, "regenerate": "first"}).input.conversation_turns == "first"
    assert parse_job({**files, "regenerate": "all"}).input.conversation_turns == "all"
    explicit = {**BASE, "input": {"path": "x.jsonl", "conversation_turns": "all"}, "regenerate": "first"}
    assert parse_job(explicit).input.conversation_turns == "all"  # an explicit input.conversation_turns wins
    with pytest.raises(ConfigError, match=r"drop input\.conversation_turns: history"):
        parse_job({**BASE, "input": {"path": "x.jsonl", "conversation_turns": "history"}, "regenerate": "all"})
