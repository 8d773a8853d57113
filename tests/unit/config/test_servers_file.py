"""The servers file has one parser: its ``# draining`` / ``# down`` marks reach the job's servers, the run that
follows the fleet's endpoints file and the doctor alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import JobSpec
from tokenmill.config.servers import Endpoint, parse_servers
from tokenmill.errors import ConfigError
from tokenmill.fleet import endpoints
from tokenmill.run.access import read_api_key, resolve_access

TEXT = """# tokenmill fleet endpoints
http://127.0.0.1:30000
http://127.0.0.1:30001/  # draining
http://127.0.0.1:30002  # down (restarting)
http://127.0.0.1:30003  # rack 4
"""


def test_marks_are_read_and_other_comments_ignored() -> None:
    assert parse_servers(TEXT) == [
        Endpoint("http://127.0.0.1:30000"),
        Endpoint("http://127.0.0.1:30001", "draining"),
        Endpoint("http://127.0.0.1:30002", "down"),
        Endpoint("http://127.0.0.1:30003"),
    ]
    assert endpoints.parse(TEXT) == parse_servers(TEXT)  # the fleet's follower reads it the same way
    assert parse_servers(endpoints.render(parse_servers(TEXT))) == parse_servers(TEXT)


def test_a_jobs_servers_file_keeps_its_marks(tmp_path: Path) -> None:
    path = tmp_path / "servers.txt"
    path.write_text(TEXT)
    job = JobSpec.model_validate(
        {"input": {"path": "x.jsonl"}, "servers_file": str(path), "output": {"dir": str(tmp_path / "out")}}
    )
    marks = {ep.url: ep.mark for ep in resolve_access(job).endpoints}
    assert marks["http://127.0.0.1:30002"] == "down" and marks["http://127.0.0.1:30001"] == "draining"
    assert resolve_access(job).servers == list(marks)


def test_the_api_key_is_read_from_the_variable_the_job_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = JobSpec.model_validate(
        {"input": {"path": "x.jsonl"}, "servers": ["http://h:1"], "api_key_env": "TM_KEY", "output": {"dir": "o"}}
    )
    monkeypatch.delenv("TM_KEY", raising=False)
    with pytest.raises(ConfigError, match="api_key_env names 'TM_KEY'"):
        resolve_access(job)
    with pytest.raises(ConfigError, match="--api-key-env names 'TM_KEY'"):
        read_api_key("TM_KEY", "--api-key-env")
    monkeypatch.setenv("TM_KEY", "k1")
    access = resolve_access(job)
    assert access.api_key == "k1" and dict(access.headers) == {"Authorization": "Bearer k1"}
    assert read_api_key(None) is None


def test_an_unreadable_servers_file_names_the_setting(tmp_path: Path) -> None:
    job = JobSpec.model_validate(
        {"input": {"path": "x.jsonl"}, "servers_file": str(tmp_path / "nope.txt"), "output": {"dir": "o"}}
    )
    with pytest.raises(ConfigError, match=r"servers_file .*nope\.txt.* cannot be read"):
        resolve_access(job)
