"""The servers file has one parser: its ``# draining`` / ``# down`` marks reach the job's servers, the run that
follows the fleet's endpoints file and the doctor alike."""

from __future__ import annotations

from pathlib import Path

from tokenmill.config import JobSpec
from tokenmill.config.servers import Endpoint, parse_servers
from tokenmill.run import endpoints

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
    marks = {ep.url: ep.mark for ep in job.resolved_endpoints()}
    assert marks["http://127.0.0.1:30002"] == "down" and marks["http://127.0.0.1:30001"] == "draining"
    assert job.resolved_servers() == list(marks)
