"""Several answers per prompt (``samples: N``): ids, seeds, partitions, the job's identity, the request bodies, the
records, verify's count per row, inspect's repeats within a prompt's samples, and both export layouts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.helpers.factories import completion
from tokenmill.backends import BackendOptions, make_backend
from tokenmill.config import InputSpec, SamplingSpec, parse_job
from tokenmill.errors import ConfigError
from tokenmill.export import ExportOptions, export
from tokenmill.export.grouped import SampleGroups
from tokenmill.output import OutputDir
from tokenmill.output.identity import changed_fields, fingerprint, new_record
from tokenmill.output.verify import verify
from tokenmill.quality.corpus import inspect_output
from tokenmill.records import Generation, Prompt, Skip
from tokenmill.records.read import CompletionRecord
from tokenmill.run.work import RecordMaker, Work
from tokenmill.sources import iter_prompts
from tokenmill.sources.partition import Split
from tokenmill.sources.samples import sample_seed, split_sample_id


def write_rows(path: Path, ids: list[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": i, "prompt": f"say {i}"}) + b"\n" for i in ids))
    return path


def spec(path: Path, **kw: Any) -> InputSpec:
    return InputSpec(path=str(path), id_field="id", **kw)


def prompts(items: list[Prompt | Skip]) -> list[Prompt]:
    return [p for p in items if isinstance(p, Prompt)]


def test_each_row_becomes_n_prompts_with_ids_and_seeds_of_their_own(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "in.jsonl", ["a", "b_gen1", "c"])
    got = prompts(list(iter_prompts(spec(data), samples=3)))
    assert [p.id for p in got] == [f"{r}_gen{k}" for r in ("a", "b_gen1", "c") for k in range(3)]
    assert [(p.primary_id, p.sample) for p in got[:3]] == [("a", 0), ("a", 1), ("a", 2)]
    assert all(p.text == f"say {p.primary_id}" for p in got)
    assert [split_sample_id(p.id) for p in got[3:6]] == [("b_gen1", k) for k in range(3)]
    for row in ("a", "b_gen1", "c"):  # distinct within a row, and the same on every run
        seeds = [p.seed for p in got if p.primary_id == row]
        assert len(set(seeds)) == 3 and all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds)
    again = prompts(list(iter_prompts(spec(data), samples=3)))
    assert [p.seed for p in again] == [p.seed for p in got]
    assert len({p.seed for p in got}) == 9  # different rows draw different seeds too
    assert all(p.seed == sample_seed(p.primary_id or "", p.sample or 0, None) for p in got)


def test_a_job_seed_gives_seed_plus_k_and_one_sample_keeps_ids_and_sends_no_seed(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "in.jsonl", ["a", "b"])
    seeded = prompts(list(iter_prompts(spec(data), samples=2, seed=100)))
    assert [(p.id, p.seed) for p in seeded] == [("a_gen0", 100), ("a_gen1", 101), ("b_gen0", 100), ("b_gen1", 101)]
    single = prompts(list(iter_prompts(spec(data), samples=1, seed=100)))
    assert [(p.id, p.primary_id, p.sample, p.seed) for p in single] == [(r, None, None, None) for r in ("a", "b")]
    assert sample_seed("a", 1, None) == (sample_seed("a", 0, None) + 1) % 2**31


def test_a_duplicate_row_is_one_skip_not_n(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "in.jsonl", ["a", "a", "b"])
    items = list(iter_prompts(spec(data, on_bad_row="skip"), samples=3))
    assert [i.id for i in items if isinstance(i, Prompt)] == [f"{r}_gen{k}" for r in ("a", "b") for k in range(3)]
    skips = [i for i in items if isinstance(i, Skip)]
    assert len(skips) == 1 and "duplicate id 'a'" in skips[0].reason


def test_a_rows_samples_stay_on_the_partition_of_its_own_id(tmp_path: Path) -> None:
    ids = [f"r{i:03d}" for i in range(120)]
    data = write_rows(tmp_path / "in.jsonl", ids)
    parts = [prompts(list(iter_prompts(spec(data), Split(i, 3, "ids"), samples=4))) for i in range(3)]
    owner = {p.primary_id: i for i, part in enumerate(parts) for p in part}
    for i, part in enumerate(parts):
        per_row = Counter(p.primary_id for p in part)
        assert set(per_row.values()) == {4}  # all four samples of each of its rows, none of another's
        assert all(owner[p.primary_id] == i for p in part)
    assert sorted(p.id for part in parts for p in part) == sorted(f"{r}_gen{k}" for r in ids for k in range(4))
    assert all(len(part) > 0 for part in parts)


def job(tmp_path: Path, **kw: Any) -> Any:
    base: dict[str, Any] = {"input": {"path": str(tmp_path)}, "servers": ["http://s"], "output": {"dir": "o"}}
    return parse_job({**base, **kw})


def test_samples_is_part_of_the_jobs_identity_but_one_leaves_older_outputs_as_they_were(tmp_path: Path) -> None:
    plain, one, three = job(tmp_path), job(tmp_path, samples=1), job(tmp_path, samples=3)
    assert fingerprint(plain) == fingerprint(one)
    assert "samples" not in new_record(plain).identity
    assert fingerprint(three) != fingerprint(one)
    assert changed_fields(new_record(one), three) == ["samples"]
    assert changed_fields(new_record(three), one) == ["samples"]
    with pytest.raises(ConfigError):
        job(tmp_path, samples=0)


async def test_each_sample_is_sent_with_its_own_seed_on_every_api(http_server: Any) -> None:
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        if request.path == "/generate":
            return web.json_response({"text": "x", "meta_info": {"finish_reason": "stop"}})
        return web.json_response({"choices": [{"message": {"content": "x"}, "text": "x", "finish_reason": "stop"}]})

    url = await http_server(handler)
    options = BackendOptions(model="m", sampling=SamplingSpec(max_tokens=5, seed=7))
    sample = Prompt(id="a_gen2", text="hi", primary_id="a", sample=2, seed=1234)
    async with aiohttp.ClientSession() as session:
        for kind in ("openai-chat", "openai-completions", "sglang-generate"):
            backend = make_backend(kind, options)
            await backend.generate(session, url, sample)
            await backend.generate(session, url, Prompt(id="plain", text="hi"))
    chat, chat_plain, comp, comp_plain, gen, gen_plain = bodies
    assert (chat["seed"], comp["seed"], gen["sampling_params"]["sampling_seed"]) == (1234, 1234, 1234)
    assert (chat_plain["seed"], comp_plain["seed"], gen_plain["sampling_params"]["sampling_seed"]) == (7, 7, 7)


def test_the_record_names_its_row_its_sample_and_the_seed_it_was_sent_with() -> None:
    maker = RecordMaker(model="m", sampling={"temperature": 0.7, "samples": 3}, wall=lambda: 5.0)
    gen = Generation(text="t", finish_reason="stop", prompt_tokens=1, completion_tokens=1)
    rec = maker.completion(Work(Prompt(id="a_gen1", text="q", primary_id="a", sample=1, seed=99)), gen, "s", 0.1)
    assert (rec.id, rec.primary_id, rec.sample, rec.sampling) == (
        "a_gen1",
        "a",
        1,
        {"temperature": 0.7, "samples": 3, "seed": 99},
    )
    plain = maker.completion(Work(Prompt(id="b", text="q")), gen, "s", 0.1)
    assert (plain.primary_id, plain.sample, plain.sampling) == (None, None, {"temperature": 0.7, "samples": 3})


def test_a_later_turn_keeps_the_samples_seed() -> None:
    first = Prompt(
        id="a_gen0",
        messages=[{"role": "user", "content": "q1"}],
        followups=[{"role": "user", "content": "q2"}],
        primary_id="a",
        sample=0,
        seed=42,
    )
    work = Work(first)
    assert not work.answered(Generation("a1", "stop", 1, 1), "s", 0.1)
    assert work.current.seed == 42


def sampled(rid: str, k: int, answer: str, n: int = 3, **kw: Any) -> Any:
    return completion(
        f"{rid}_gen{k}", primary_id=rid, sample=k, completion=answer, sampling={"samples": n, "seed": k}, **kw
    )


LONG = "The same long answer, word for word, repeated by two samples of one prompt, longer than sixty-four."


def test_verify_counts_each_rows_answers_and_names_what_each_lacks(tmp_path: Path) -> None:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=10)
    od.open()
    for rid, ks in (("a", (0, 1, 2)), ("b", (0, 2)), ("c", ())):
        for k in ks:
            od.write(sampled(rid, k, f"answer {rid} {k}"))
    od.close(seal=True)
    report = verify(out, (f"{r}_gen{k}" for r in "abc" for k in range(3)), samples=3)
    assert not report.ok
    assert report.counts["input_rows"] == 3 and report.counts["rows_short"] == 2
    short = sorted(p.detail for p in report.problems if p.kind == "samples-missing")
    assert short == ["id 'b': 2 of 3 answers (missing: 1)", "id 'c': 0 of 3 answers (missing: 0, 1, 2)"]
    assert "3 rows x 3: 2 with fewer than 3 answers" in report.render()
    whole = verify(out, (f"{r}_gen{k}" for r, ks in (("a", (0, 1, 2)), ("b", (0, 2))) for k in ks), samples=3)
    assert whole.ok


def test_inspect_counts_answers_repeated_within_a_prompts_samples(tmp_path: Path) -> None:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=10)
    od.open()
    od.write(sampled("a", 0, LONG))
    od.write(sampled("b", 0, LONG + " Another prompt's answer, the same text: a repeat across prompts only."))
    od.write(sampled("a", 1, "a different answer of the first prompt, long enough to be compared at all here."))
    od.write(sampled("a", 2, LONG))
    od.write(sampled("b", 1, LONG + " Another prompt's answer, the same text: a repeat across prompts only."))
    od.write(sampled("c", 0, LONG))  # another prompt repeating a's answer is not a repeat within samples
    od.close(seal=True)
    quality = inspect_output(out)
    assert quality.sampled == 6 and quality.sample_duplicates == 2
    assert quality.sample_duplicate_ids == [("a_gen0", "a_gen2"), ("b_gen0", "b_gen1")]
    data = quality.as_dict()["sample_duplicates"]
    assert data["count"] == 2 and data["sampled_records"] == 6
    assert "answers repeated within a prompt's samples: 2 of 6" in quality.render()


def test_a_corpus_without_samples_shows_no_sample_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=10)
    od.open()
    od.write(completion("a", completion=LONG))
    od.write(completion("b", completion=LONG))
    od.close(seal=True)
    quality = inspect_output(out)
    assert quality.sampled == 0 and "sample_duplicates" not in quality.as_dict()
    assert "within a prompt's samples" not in quality.render()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=4)
    od.open()
    # samples of one prompt finish close together, not in order; c's sample 1 never finished (failed)
    for rid, k in (("a", 1), ("b", 0), ("a", 0), ("a", 2), ("c", 0), ("b", 2), ("b", 1), ("c", 2)):
        od.write(sampled(rid, k, f"answer {rid} {k}"))
    od.close(seal=False)
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_export_writes_one_row_per_answer_with_its_row_and_sample(corpus: Path, tmp_path: Path) -> None:
    dest = tmp_path / "answers.jsonl"
    counts = export(corpus, dest, ExportOptions(format="sharegpt"))
    rows = lines(dest)
    assert counts.kept == 8 and counts.groups is None
    assert sorted((r["id"], r["primary_id"], r["sample"]) for r in rows)[:3] == [
        ("a_gen0", "a", 0),
        ("a_gen1", "a", 1),
        ("a_gen2", "a", 2),
    ]
    assert all(r["conversations"][-1]["value"] == f"answer {r['primary_id']} {r['sample']}" for r in rows)


def test_export_grouped_writes_one_row_per_prompt_with_its_answers_in_order(corpus: Path, tmp_path: Path) -> None:
    dest = tmp_path / "grouped.jsonl"
    counts = export(corpus, dest, ExportOptions(format="openai-messages", samples="grouped"))
    rows = {r["id"]: r for r in lines(dest)}
    assert sorted(rows) == ["a", "b", "c"]
    assert [a["sample"] for a in rows["a"]["answers"]] == [0, 1, 2]
    assert [a["id"] for a in rows["c"]["answers"]] == ["c_gen0", "c_gen2"]
    assert rows["b"]["answers"][1]["messages"][-1] == {"role": "assistant", "content": "answer b 1"}
    assert (counts.groups, counts.incomplete_groups, counts.kept) == (3, 1, 8)
    assert "grouped into 3 rows, one per prompt; 1 with fewer answers" in counts.render()
    assert orjson.loads((tmp_path / "grouped.jsonl.counts.json").read_bytes())["incomplete_groups"] == 1


def test_an_answer_left_out_still_completes_its_group(corpus: Path, tmp_path: Path) -> None:
    dest = tmp_path / "grouped.jsonl"
    counts = export(
        corpus, dest, ExportOptions(format="sharegpt", samples="grouped", min_completion_tokens=2, allow_empty=True)
    )
    assert counts.kept == 0 and counts.groups == 0  # every answer has 1 completion token: no group has a row
    groups = SampleGroups(limit=100)
    for k in range(3):
        rec = CompletionRecord.from_json(orjson.loads(orjson.dumps(sampled("a", k, "x"))))
        if k == 1:
            groups.left_out(rec)
        else:
            groups.add(rec, {"id": rec.id})
        assert groups.take() == ([] if k < 2 else [{"id": "a", "answers": [{"id": "a_gen0"}, {"id": "a_gen2"}]}])
    assert (groups.written, groups.incomplete) == (1, 1)


def test_grouping_holds_at_most_its_limit_and_writes_what_is_left_at_the_end() -> None:
    groups = SampleGroups(limit=4)
    order = [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("e", 0), ("a", 1), ("e", 1)]
    written: list[dict[str, Any]] = []
    for rid, k in order:
        rec = CompletionRecord.from_json(orjson.loads(orjson.dumps(sampled(rid, k, "x", n=2))))
        groups.add(rec, {"id": rec.id})
        written += groups.take()
        assert groups._held <= 4
    groups.finish()
    written += groups.take()
    # e's first answer fills the buffer past 4: the oldest group (a, one answer then) is written early; a's
    # second answer then starts a row of its own and pushes b out; e completes; c, d and a are written at the end
    assert [w["id"] for w in written] == ["a", "b", "e", "c", "d", "a"]
    assert (groups.written, groups.incomplete) == (6, 5)


def test_grouped_is_refused_for_table_and_token_formats(corpus: Path, tmp_path: Path) -> None:
    for fmt in ("parquet", "hf"):
        with pytest.raises(ConfigError, match="--samples grouped writes JSON lines"):
            export(corpus, tmp_path / f"x.{fmt}", ExportOptions(format=fmt, samples="grouped"))  # type: ignore[arg-type]


def test_an_unsampled_jobs_export_rows_are_as_before(tmp_path: Path) -> None:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=4)
    od.open()
    od.write(completion("a"))
    od.close(seal=True)
    dest = tmp_path / "plain.jsonl"
    export(out, dest, ExportOptions(format="sharegpt"))
    row = lines(dest)[0]
    assert row["id"] == "a" and "primary_id" not in row and "sample" not in row
