"""``OUT/job.json``: one job per output directory, and its record durable.

It is written atomically and fsynced: after a machine crash the job id is still there (it owns the remote
prefix; a lost or empty job.json would stop the next start, and a new one would be another job). A job that
would change what a completion is (input, API, model, sampling) is refused in an output of another job.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson
import pytest

from tokenmill.config import JobSpec, parse_job
from tokenmill.errors import ConfigError, OutputError
from tokenmill.output.fsio import atomic_create
from tokenmill.output.identity import (
    JobRecord,
    check_job_identity,
    fingerprint,
    read_record,
    read_record_quietly,
    recorded_job,
)


def job(**sampling: object) -> JobSpec:
    return parse_job(
        {
            "input": {"path": "in.jsonl"},
            "servers": ["http://127.0.0.1:9"],
            "output": {"dir": "out"},
            "sampling": {"max_tokens": 16, **sampling},
        }
    )


def test_job_json_is_fsynced_then_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    job_id = check_job_identity(tmp_path, job(), allow_changed=False)
    tmp = Path(synced[0])
    assert tmp.parent == tmp_path and tmp.name.startswith("job.json.") and tmp.name.endswith(".tmp"), (
        "the content is durable before it is linked into place"
    )
    assert synced[-1] == str(tmp_path), "the link is durable (the directory is fsynced)"
    assert orjson.loads((tmp_path / "job.json").read_bytes())["job_id"] == job_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"], "no temporary file is left"
    assert check_job_identity(tmp_path, job(), allow_changed=False) == job_id


def test_another_job_in_the_same_output_is_refused_unless_allowed(tmp_path: Path) -> None:
    first = check_job_identity(tmp_path, job(), allow_changed=False)
    with pytest.raises(ConfigError, match=r"different job \(changed: sampling: sampling.temperature 0.7 -> 0.1\)"):
        check_job_identity(tmp_path, job(temperature=0.1), allow_changed=False)
    assert check_job_identity(tmp_path, job(temperature=0.1), allow_changed=True) == first
    assert orjson.loads((tmp_path / "job.json").read_bytes())["job_id"] == first  # the record is not replaced


def test_an_output_written_under_the_old_defaults_says_how_to_go_on(tmp_path: Path) -> None:
    """An output written when max_tokens was 2048 and conversations were answered on their first turn records
    those values; the same job file (without sampling or conversation_turns) now means 8192 and every turn: the
    refusal names both values and the settings that resume it as before."""
    files = {"input": {"path": "in.jsonl"}, "servers": ["http://127.0.0.1:9"], "output": {"dir": "out"}}
    old = parse_job({**files, "input": {"path": "in.jsonl", "conversation_turns": "first"},
                     "sampling": {"max_tokens": 2048}})  # fmt: skip
    check_job_identity(tmp_path, old, allow_changed=False)
    with pytest.raises(ConfigError) as refused:
        check_job_identity(tmp_path, parse_job(files), allow_changed=False)
    text = str(refused.value)
    assert "sampling.max_tokens 2048 -> 8192" in text and "input.conversation_turns 'first' -> 'all'" in text
    assert "set input.conversation_turns: first, sampling.max_tokens: 2048 in the job file to go on as before" in text
    as_before = parse_job({**files, "input": {"path": "in.jsonl", "conversation_turns": "first"},
                           "sampling": {"max_tokens": 2048}})  # fmt: skip
    check_job_identity(tmp_path, as_before, allow_changed=False)  # resumes
    # the old spelling still reads: `regenerate: first` alone means one answer per row
    assert parse_job({**files, "regenerate": "first"}).input.conversation_turns == "first"
    assert parse_job({**files, "regenerate": "all"}).input.conversation_turns == "all"


def test_the_recorded_job_is_read_back_from_the_output_for_commands_given_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match=r"no job record.*pass the job file"):
        recorded_job(out)
    original = job(temperature=0.6)
    check_job_identity(out, original, allow_changed=False)
    again = recorded_job(out, {"servers": ["http://127.0.0.1:10"]})
    assert again.output.dir == str(out) and again.servers == ["http://127.0.0.1:10"]
    assert fingerprint(again) == fingerprint(original)  # the same job: its rounds extend this output

    secret = parse_job(
        {
            "input": {"path": "in.jsonl"},
            "servers": ["http://127.0.0.1:9"],
            "output": {"dir": "out", "remote": "s3://b/p/", "storage_options": {"secret": "s3cr3t"}},
        }
    )
    masked = tmp_path / "masked"
    masked.mkdir()
    check_job_identity(masked, secret, allow_changed=False)
    assert b"s3cr3t" not in (masked / "job.json").read_bytes()
    with pytest.raises(ConfigError, match=r"secrets masked.*pass the job file"):
        recorded_job(masked)


def test_writers_sharing_a_directory_agree_on_one_job_record(tmp_path: Path) -> None:
    """The partitions of a run on one machine share its directory and may start in the same instant: exactly
    one creates job.json, every other one reads that record (one job id), and none fails on the way."""
    ids: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer() -> None:
        start.wait()
        try:
            ids.append(check_job_identity(tmp_path, job(), allow_changed=False))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ids) == 8 and len(set(ids)) == 1
    assert orjson.loads((tmp_path / "job.json").read_bytes())["job_id"] == ids[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]


def test_the_record_is_created_once_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    assert atomic_create(path, b"first") and not atomic_create(path, b"second")
    assert path.read_bytes() == b"first" and sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]


def test_a_job_record_reads_back_what_it_wrote_and_keeps_keys_it_does_not_know(tmp_path: Path) -> None:
    first = check_job_identity(tmp_path, job(), allow_changed=False)
    record = read_record(tmp_path)
    assert record is not None and record.job_id == first and record.setting("api") == "openai-chat"
    assert record.section("output")["dir"] == "out" and record.fingerprint == fingerprint(job())
    later = {**record.to_json(), "written_by": "a later version"}
    again = JobRecord.from_json(later)
    assert again.to_json() == later, "a record rewritten (a claim copied into a directory) keeps every key"


def test_a_job_record_with_mistyped_fields_reads_as_empty_ones() -> None:
    record = JobRecord.from_json({"job_id": 7, "spec": [], "identity": "x", "created_at": True})
    assert (record.job_id, record.spec, record.identity, record.created_at) == ("", {}, {}, 0.0)
    assert record.setting("model") is None and record.section("output") == {}


def test_status_reads_the_model_and_api_through_the_one_job_json_reader(tmp_path: Path) -> None:
    check_job_identity(tmp_path, job(), allow_changed=False)
    (tmp_path / "job.json").write_bytes(b"{not json")
    assert read_record_quietly(tmp_path) is None
    with pytest.raises(OutputError, match="unreadable"):
        read_record(tmp_path)
