"""Regeneration rounds: the live answer of each prompt, rounds that exist only once written, verify's view, the
round's job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import JobSpec
from tokenmill.errors import ConfigError
from tokenmill.output import OutputDir, verify
from tokenmill.output.rounds import create, rounds, superseding
from tokenmill.quality.regenerate import choose, parse_sampling, round_job, sampling_with
from tokenmill.records import Completion
from tokenmill.storage.corpus import open_corpus


def rec(rid: str, text: str, finish: str = "stop") -> Completion:
    return Completion(
        id=rid,
        prompt=[{"role": "user", "content": f"question {rid}"}],
        completion=text,
        finish_reason=finish,
        prompt_tokens=3,
        completion_tokens=5,
        model="m",
        sampling={},
        server="s",
        latency_s=0.1,
        attempts=1,
        started_at=0.0,
        finished_at=1.0,
    )


def write(root: Path, records: list[Completion]) -> None:
    od = OutputDir(root, shard_size=2)
    od.open()
    for r in records:
        od.write(r)
    od.close(seal=True)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    root = tmp_path / "out"
    write(root, [rec("a", "fine"), rec("b", ""), rec("c", "loop " * 300, "length"), rec("d", "fine too")])
    return root


def test_a_round_replaces_exactly_the_answers_it_gave(out: Path) -> None:
    rows, counts = choose(out, ("degenerate",))
    assert [r["id"] for r in rows] == ["b", "c"] and counts == {"degenerate": 2}
    assert rows[0] == {"id": "b", "messages": [{"role": "user", "content": "question b"}]}
    rnd = create(out, rows, {"where": ["degenerate"], "sampling": {"seed": 1}})
    assert rnd.name == "round-001" and rnd.header()["prompts"] == 2
    assert not rnd.finished() and rnd.progress() == (0, 2)
    write(rnd.out, [rec("c", "a real answer")])  # the round got one answer so far
    live = {r.key: r.to_json() for r in open_corpus(out).iter_live()}
    assert sorted(live) == ["a", "b", "c", "d"]
    assert live["c"]["completion"] == "a real answer" and live["c"]["round"] == 1
    assert live["b"]["completion"] == "" and "round" not in live["b"]  # not answered again yet: the old one
    assert superseding(out) == {"c": 1}
    report = verify(out)
    assert report.ok, report.render()
    assert report.counts["regenerated"] == 1
    assert any("round-001 is unfinished: 1 of 2" in n for n in report.notes)
    # the next round takes the live answers: only b is still degenerate
    rows, _ = choose(out, ("degenerate",))
    assert [r["id"] for r in rows] == ["b"]
    assert create(out, rows, {}).number == 2


def test_a_round_without_its_header_does_not_exist(out: Path) -> None:
    rnd = create(out, [{"id": "b", "prompt": "x"}], {})
    rnd.header_path.unlink()  # a crash before the header was written
    assert rounds(out) == []
    assert create(out, [{"id": "b", "prompt": "x"}], {}).number == 1


def test_verify_refuses_a_round_that_answers_an_id_never_completed(out: Path) -> None:
    rnd = create(out, [{"id": "zzz", "prompt": "x"}], {})
    write(rnd.out, [rec("zzz", "an answer")])
    report = verify(out)
    assert not report.ok and report.totals == {"round-foreign": 1}


def test_sampling_changes_go_to_known_fields_or_the_request_body() -> None:
    changes = parse_sampling(["seed=7", "frequency_penalty=0.3", "stop=[END]"])
    assert changes == {"seed": 7, "frequency_penalty": 0.3, "stop": ["END"]}
    job = JobSpec.model_validate(
        {
            "input": {"path": "x.jsonl", "system_prompt": "be brief", "conversation_turns": "history"},
            "servers": ["http://127.0.0.1:1"],
            "sampling": {"temperature": 0.8, "extra_body": {"top_k": 20}},
            "output": {"dir": "/tmp/o", "remote": "s3://b/p"},
        }
    )
    sampling = sampling_with(job.sampling, changes)
    assert (sampling.seed, sampling.temperature, sampling.stop) == (7, 0.8, ["END"])
    assert sampling.extra_body == {"top_k": 20, "frequency_penalty": 0.3}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_sampling(["seed"])
    with pytest.raises(ConfigError, match="--sampling"):
        sampling_with(job.sampling, {"temperature": -1})


def test_the_round_job_reads_the_round_and_writes_beside_the_output(out: Path) -> None:
    job = JobSpec.model_validate(
        {
            "input": {"path": "x.jsonl", "system_prompt": "be brief", "conversation_turns": "history"},
            "servers": ["http://127.0.0.1:1"],
            "output": {"dir": str(out), "remote": "s3://b/p"},
        }
    )
    rnd = create(out, [{"id": "b", "prompt": "x"}], {})
    rj = round_job(job, rnd, {"seed": 3})
    assert rj.input.path == str(rnd.prompts_path) and rj.input.id_field == "id"
    assert rj.input.system_prompt is None  # the prompts are as they were sent
    assert rj.input.conversation_turns == "history"
    assert rj.output.dir == str(out / "regenerate" / "round-001")
    assert rj.output.remote == "s3://b/p/_tokenmill/regenerate/round-001/"
    assert rj.sampling.seed == 3


def test_reading_a_run_in_progress_follows_a_shard_sealed_since_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tokenmill.output import records_reader

    root = tmp_path / "o"
    od = OutputDir(root, shard_size=10)
    od.open()
    for i in range(3):
        od.write(rec(f"r{i}", "fine"))
    od.close(seal=True)  # the writer sealed it between a listing that saw it open and the read
    assert (root / "completions_000000.jsonl").exists()
    monkeypatch.setattr(records_reader, "shard_paths", lambda _root: [root / "completions_000000.jsonl.open"])
    assert [r["id"] for r in records_reader.iter_records(root)] == ["r0", "r1", "r2"]


def test_a_round_whose_shards_were_offloaded_after_upload_is_finished(out: Path) -> None:
    rows, _ = choose(out, ("degenerate",))
    rnd = create(out, rows, {"where": ["degenerate"]})
    write(rnd.out, [rec("b", "an answer"), rec("c", "a real answer")])
    for shard in rnd.out.glob("completions_*.jsonl"):
        shard.unlink()  # delete_after_upload: the shard lives at the remote only, its manifest line stays
    assert rnd.progress() == (2, 2) and rnd.finished()
