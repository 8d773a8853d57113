"""The typed read model of a completion record: what the writer wrote reads back whole, an older or odd record
reads leniently, one conversation builder, ids keyed on one string, and the job read back as the typed spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.helpers.factories import completion
from tokenmill.config import parse_job
from tokenmill.errors import PermanentError
from tokenmill.output.identity import JobRecord
from tokenmill.quality.signals import signals
from tokenmill.records import Generation, Prompt, Turn, encode
from tokenmill.records.read import CompletionRecord, id_key
from tokenmill.run.work import RecordMaker, Work
from tokenmill.sources.samples import expand

USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}]


def _turn(text: str, finish: str, reasoning: str | None = None) -> dict[str, Any]:
    quality = signals(text, finish, reasoning).as_dict()
    return Turn(text, finish, 5, 7, "http://s", 0.5, reasoning, quality=quality).as_dict()


def _multi(rid: str | int, first: str = "length", last: str = "stop", **fields: Any) -> Any:
    """A two-turn record as this version writes it (the record's finish reason is the caller's)."""
    turns = [_turn("a1", first, "r1"), _turn("a2", last)]
    return completion(rid, prompt=USER, completion="a2", finish_reason=last, turns=turns, **fields)  # type: ignore[arg-type]


def test_a_written_record_reads_back_whole() -> None:
    written = orjson.loads(encode(_multi(1000074, origin={"engine": "sglang"}, fields={"lang": "en"})))
    rec = CompletionRecord.from_json(written)
    assert rec.to_json() == written
    assert rec.id == 1000074 and rec.key == "1000074"  # the JSON type kept; the key is its decimal string
    assert [a.finish_reason for a in rec.answers] == ["length", "stop"] and rec.turns[0].reasoning_content == "r1"


def test_an_old_or_odd_record_reads_leniently_and_keeps_what_it_does_not_know() -> None:
    rec = CompletionRecord.from_json(
        {"id": "x", "prompt": "hi", "completion": None, "completion_tokens": "12", "thinking": "yes", "note": 1}
    )
    assert rec.answer.text == "" and rec.completion_tokens is None and rec.thinking is None
    assert rec.finish_reason is None and rec.sampling == {} and rec.samples == 1
    assert rec.to_json()["note"] == 1 and rec.to_json()["completion"] is None  # written back as it was read
    assert CompletionRecord.from_json({"id": True}).id == ""  # a bool is no id


def test_one_conversation_a_null_answer_is_empty_text_in_both_forms() -> None:
    rec = CompletionRecord.from_json({"id": "n", "prompt": USER[1:2], "completion": None})
    assert rec.conversation() == [USER[1], {"role": "assistant", "content": ""}]
    assert rec.turn_conversations() == [rec.conversation()]
    multi = CompletionRecord.from_json(orjson.loads(encode(_multi("m"))))
    whole = multi.conversation(reasoning=False)
    assert [m["role"] for m in whole] == ["system", "user", "assistant", "user", "assistant"]
    second = multi.turn_conversations()[1]
    assert second[:-1] == whole[:-1] and second[-1] == {"role": "assistant", "content": "a2"}
    assert multi.turn_conversations()[0][-1]["reasoning_content"] == "r1"  # the turn's own answer: with reasoning


def test_ids_key_on_one_canonical_string() -> None:
    assert id_key(7) == id_key("7") == "7"
    sampled = CompletionRecord.from_json({"id": "7_gen1", "primary_id": 7, "sample": 1, "sampling": {"samples": 2}})
    assert (sampled.group_key, sampled.samples) == ("7", 2)


def test_the_job_reads_back_as_the_typed_spec(tmp_path: Path) -> None:
    job = parse_job(
        {"input": {"path": "p.jsonl"}, "servers": ["http://s:1"], "output": {"dir": str(tmp_path)}, "tokenizer": "t"}
    )
    record = JobRecord.from_json(orjson.loads(orjson.dumps(JobRecord.new(job).to_json())))
    typed = record.job()
    assert typed is not None and typed.sampling.max_tokens == job.sampling.max_tokens and typed.tokenizer == "t"
    assert JobRecord.from_json({"spec": {"servers": "not a list"}}).job() is None  # unreadable: None, not a raise


def test_a_sampled_integer_id_keeps_its_type_as_the_primary_id() -> None:
    row = Prompt(id="7", messages=[{"role": "user", "content": "q"}], id_value=7)
    first, second = list(expand(iter([row]), 2, None))
    assert isinstance(first, Prompt) and isinstance(second, Prompt)
    maker = RecordMaker(model="m", sampling={}, wall=lambda: 1.0)
    gen = Generation("a", "stop", 1, 1)
    written = [orjson.loads(encode(maker.completion(Work(p), gen, "http://s", 0.1))) for p in (first, second)]
    assert [(r["id"], r["primary_id"]) for r in written] == [("7_gen0", 7), ("7_gen1", 7)]
    assert orjson.loads(encode(maker.completion(Work(row), gen, "http://s", 0.1)))["id"] == 7
    assert maker.failure(Work(row), PermanentError("no"), "http://s").id == 7
