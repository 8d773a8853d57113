"""``export --format tokens`` and the chat template round trip, with the tiny model's tokenizer (ChatML).

The rows are read back by two readers written here after the trainers' own: SpecForge's pre-tokenized path
(``data.prompts_path``: the first record decides the path; every row needs ``input_ids`` and ``loss_mask``, flat
integer lists of one non-empty length, the mask 0/1; one bad row fails the whole file) and vLLM speculators'
pass-through of speculator-format rows (both columns present in every row, one length per row; a nested list
breaks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from tests.helpers.factories import completion
from tokenmill.cli import cli
from tokenmill.errors import ConfigError
from tokenmill.export import ExportOptions, export
from tokenmill.export.roundtrip import check_corpus
from tokenmill.export.tokens import TokenOptions
from tokenmill.output import OutputDir

pytest.importorskip("transformers")
from tests.helpers.export import prompts_path_reader, speculators_reader
from tokenmill.backends.templating import ChatTemplater

TINY = Path(__file__).resolve().parents[3] / ".cache" / "tiny-model"
pytestmark = pytest.mark.skipif(not (TINY / "tokenizer.json").exists(), reason="make tiny-model builds it")


# -- the trainers' readers ------------------------------------------------------------------------------------------


def test_the_readers_refuse_what_the_trainers_refuse(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    refused: tuple[dict[str, Any], ...] = (
        {"input_ids": [1, 2], "loss_mask": [0]},
        {"input_ids": [1, 2], "loss_mask": [0, 2]},
        {"input_ids": [1, True], "loss_mask": [0, 1]},
        {"input_ids": [], "loss_mask": []},
        {"conversations": []},
    )
    for row in refused:
        bad.write_bytes(orjson.dumps(row) + b"\n")
        with pytest.raises(ValueError):
            prompts_path_reader(bad)
    bad.write_bytes(orjson.dumps({"input_ids": [[1, 2]], "loss_mask": [[0, 1]]}) + b"\n")
    with pytest.raises(ValueError):
        speculators_reader(bad)


# -- fixtures -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok() -> ChatTemplater:
    return ChatTemplater(TINY)


USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello there"}]
TWO = [{"role": "user", "content": "first question"}, {"role": "user", "content": "second question"}]


def server_ids(tok: ChatTemplater, messages: list[dict[str, Any]], answer: str, eos: bool = True) -> dict[str, Any]:
    """What a server that renders with this template returns: the prompt's ids and the answer's (+ EOS)."""
    eos_id = tok.token_id("<|im_end|>")
    assert eos_id is not None
    return {
        "prompt_token_ids": tok.encode(tok.render(messages)),
        "completion_token_ids": tok.encode(answer) + ([eos_id] if eos else []),
    }


def two_turns(tok: ChatTemplater, ids: bool) -> dict[str, Any]:
    first = {"completion": "one answer", "finish_reason": "stop", "completion_tokens": 3}
    second = {"completion": "two answer", "finish_reason": "stop", "completion_tokens": 3}
    if ids:
        first |= server_ids(tok, TWO[:1], "one answer")
        history = [TWO[0], {"role": "assistant", "content": "one answer"}, TWO[1]]
        second |= server_ids(tok, history, "two answer")
    return {"prompt": TWO, "completion": "two answer", "turns": [first, second]}


def make_out(tmp_path: Path, *records: Any) -> Path:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=10)
    od.open()
    for rec in records:
        od.write(rec)
    od.close(seal=True)
    return out


def export_tokens(out: Path, **kw: Any) -> tuple[dict[str, dict[str, Any]], Any]:
    dest = out.parent / "tokens.jsonl"
    opts = ExportOptions(format="tokens", tokens=TokenOptions(**{"tokenizer": str(TINY), **kw}))
    counts = export(out, dest, opts)
    rows = prompts_path_reader(dest)
    assert speculators_reader(dest) == [(r["input_ids"], r["loss_mask"]) for r in rows]
    return {r["id"]: r for r in rows}, counts


def supervised(tok: ChatTemplater, row: dict[str, Any]) -> str:
    return tok.decode([t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m])


# -- rows -----------------------------------------------------------------------------------------------------------


def test_server_ids_become_the_row_with_the_answer_supervised(tmp_path: Path, tok: ChatTemplater) -> None:
    ids = server_ids(tok, USER, "Hi, how are you")
    out = make_out(tmp_path, completion("a", prompt=USER, completion="Hi, how are you", **ids))
    rows, counts = export_tokens(out)
    row = rows["a"]
    assert row["input_ids"] == ids["prompt_token_ids"] + ids["completion_token_ids"]
    n = len(ids["prompt_token_ids"])
    assert row["loss_mask"] == [0] * n + [1] * len(ids["completion_token_ids"])
    assert row["token_source"] == "server" and row["finish_reason"] == "stop"
    assert supervised(tok, row) == "Hi, how are you<|im_end|>"
    assert counts.tokens.from_server == 1 and counts.as_dict()["tokens"]["rows"] == 1


def test_a_stopped_answer_without_its_end_of_turn_gets_it(tmp_path: Path, tok: ChatTemplater) -> None:
    stopped = server_ids(tok, USER, "short", eos=False)
    cut = server_ids(tok, USER, "long and cut", eos=False)
    out = make_out(
        tmp_path,
        completion("stopped", prompt=USER, completion="short", **stopped),
        completion("cut", prompt=USER, completion="long and cut", finish_reason="length", **cut),
    )
    rows, counts = export_tokens(out)
    assert supervised(tok, rows["stopped"]) == "short<|im_end|>"
    assert supervised(tok, rows["cut"]) == "long and cut"  # hit max_tokens: no end of turn to learn
    assert counts.tokens.end_of_turn_added == 1


def test_without_ids_the_chat_template_renders_and_masks_every_assistant_turn(
    tmp_path: Path, tok: ChatTemplater
) -> None:
    out = make_out(tmp_path, completion("m", **two_turns(tok, ids=False)))
    rows, counts = export_tokens(out)
    row = rows["m"]
    convo = [
        TWO[0],
        {"role": "assistant", "content": "one answer"},
        TWO[1],
        {"role": "assistant", "content": "two answer"},
    ]
    text = tok.render_full(convo)
    assert row["input_ids"] == tok.encode(text)
    assert row["token_source"] == "template"
    assert supervised(tok, row) == "one answer<|im_end|>two answer<|im_end|>"
    unsupervised = tok.decode([t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if not m])
    assert "first question" in unsupervised and "second question" in unsupervised and "assistant" in unsupervised
    assert counts.tokens.from_template == 1


def test_multi_turn_server_ids_make_one_row_covering_every_turn(tmp_path: Path, tok: ChatTemplater) -> None:
    rec = two_turns(tok, ids=True)
    out = make_out(tmp_path, completion("m", **rec))
    rows, _ = export_tokens(out)
    row = rows["m"]
    last = rec["turns"][1]
    assert row["input_ids"] == last["prompt_token_ids"] + last["completion_token_ids"]
    assert row["token_source"] == "server"
    assert supervised(tok, row) == "one answer<|im_end|>two answer<|im_end|>"


def test_per_turn_rows_supervise_only_their_own_turn(tmp_path: Path, tok: ChatTemplater) -> None:
    out = make_out(tmp_path, completion("m", **two_turns(tok, ids=True)), completion("r", **two_turns(tok, ids=False)))
    rows, _ = export_tokens(out, per_turn=True)
    assert sorted(rows) == ["m_turn0", "m_turn1", "r_turn0", "r_turn1"]
    for rid in ("m", "r"):
        assert [rows[f"{rid}_turn{k}"]["primary_id"] for k in (0, 1)] == [rid, rid]
        assert supervised(tok, rows[f"{rid}_turn0"]) == "one answer<|im_end|>"
        assert supervised(tok, rows[f"{rid}_turn1"]) == "two answer<|im_end|>"
        assert "one answer" in tok.decode(rows[f"{rid}_turn1"]["input_ids"])  # the earlier answer as context
    assert rows["m_turn1"]["token_source"] == "server" and rows["r_turn1"]["token_source"] == "template"


def split(tok: ChatTemplater, text: str) -> list[int]:
    """``text`` as one token per character: a split the model may sample, the tokenizer would never make."""
    ids = [tok.encode(c)[0] for c in text]
    assert ids != tok.encode(text) and tok.decode(ids) == text
    return ids


def test_multi_turn_ids_with_a_resplit_history_stay_the_servers(tmp_path: Path, tok: ChatTemplater) -> None:
    """The server tokenises an earlier answer from its text when it sends the next turn: the later prompt's ids
    then hold another split than the answer's own ids, and the row is built from the last turn's ids."""
    rec = two_turns(tok, ids=True)
    eos = tok.token_id("<|im_end|>")
    rec["turns"][0]["completion_token_ids"] = [*split(tok, "one answer"), eos]
    out = make_out(tmp_path, completion("m", **rec))
    rows, counts = export_tokens(out)
    row, last = rows["m"], rec["turns"][1]
    assert row["token_source"] == "server"
    assert row["input_ids"] == last["prompt_token_ids"] + last["completion_token_ids"]
    assert supervised(tok, row) == "one answer<|im_end|>two answer<|im_end|>"
    assert not counts.tokens.notes


def test_turns_whose_ids_do_not_extend_each_other_are_rendered_and_counted(tmp_path: Path, tok: ChatTemplater) -> None:
    rec = two_turns(tok, ids=True)
    rec["turns"][1]["prompt_token_ids"] = rec["turns"][1]["prompt_token_ids"][3:]  # history rendered otherwise
    out = make_out(tmp_path, completion("m", **rec))
    rows, counts = export_tokens(out)
    assert rows["m"]["token_source"] == "template"
    assert supervised(tok, rows["m"]) == "one answer<|im_end|>two answer<|im_end|>"
    assert sum(counts.tokens.notes.values()) == 1


def test_max_length_cuts_rows_and_a_row_left_unsupervised_is_counted(tmp_path: Path, tok: ChatTemplater) -> None:
    short = server_ids(tok, USER, "ok")
    long_prompt = [{"role": "user", "content": "word " * 60}]
    long = server_ids(tok, long_prompt, "fine")
    out = make_out(
        tmp_path,
        completion("short", prompt=USER, completion="ok", **short),
        completion("long", prompt=long_prompt, completion="fine", **long),
        completion(
            "mid", prompt=USER, completion="a longer answer here", **server_ids(tok, USER, "a longer answer here")
        ),
    )
    n = len(short["prompt_token_ids"]) + 2
    rows, counts = export_tokens(out, max_length=n)
    assert sorted(rows) == ["mid", "short"]
    assert all(len(r["input_ids"]) <= n for r in rows.values())
    reason = f"no supervised token within --max-length {n}"
    assert counts.dropped == {reason: 1} and counts.kept == 2
    data = counts.as_dict()
    assert data["left_out"] == {reason: 1}
    assert data["tokens"]["rows_cut"] == 2
    full = len(long["prompt_token_ids"]) + len(long["completion_token_ids"])
    mid_full = len(short["prompt_token_ids"]) + len(tok.encode("a longer answer here")) + 1
    assert data["tokens"]["tokens_cut"] == (full - n) + (mid_full - n)


def test_records_without_ids_need_a_tokenizer(tmp_path: Path) -> None:
    out = make_out(tmp_path, completion("a", prompt=USER))
    with pytest.raises(ConfigError, match="--tokenizer"):
        export(out, tmp_path / "t.jsonl", ExportOptions(format="tokens"))
    assert not (tmp_path / "t.jsonl").exists()


# -- the round trip -------------------------------------------------------------------------------------------------


def test_round_trip_agrees_on_ids_the_template_makes(tmp_path: Path, tok: ChatTemplater) -> None:
    out = make_out(
        tmp_path,
        completion("a", prompt=USER, completion="Hi there", **server_ids(tok, USER, "Hi there")),
        completion("m", **two_turns(tok, ids=True)),
        completion("none", prompt=USER),
    )
    trip = check_corpus(out, str(TINY))
    assert (trip.checked, trip.differ, trip.without_ids) == (3, 0, 1)


def test_round_trip_says_where_the_ids_differ(tmp_path: Path, tok: ChatTemplater) -> None:
    in_answer = server_ids(tok, USER, "Hi there friend")
    in_answer["completion_token_ids"][1] = tok.encode("X")[0]
    in_prompt = server_ids(tok, USER, "ok")
    in_prompt["prompt_token_ids"][2] = tok.encode("X")[0]
    no_eos = server_ids(tok, USER, "stop", eos=False)
    resplit = server_ids(tok, USER, "question")
    resplit["completion_token_ids"] = [*split(tok, "question"), tok.token_id("<|im_end|>")]
    cut = server_ids(tok, USER, "cut here", eos=False)
    out = make_out(
        tmp_path,
        completion("split", prompt=USER, completion="question", **resplit),
        completion("cut", prompt=USER, completion="cut here", finish_reason="length", **cut),
        completion("answer", prompt=USER, completion="Hi there friend", **in_answer),
        completion("prompt", prompt=USER, completion="ok", **in_prompt),
        completion("end", prompt=USER, completion="stop", **no_eos),
        completion("same", prompt=USER, completion="fine", **server_ids(tok, USER, "fine")),
    )
    trip = check_corpus(out, str(TINY), examples=10)
    assert (trip.checked, trip.differ, trip.same_text) == (6, 5, 1)
    assert trip.where == {"completion": 2, "prompt": 1, "end": 1, "cut": 1}
    found = {d.id: d for d in trip.examples}
    assert found["split"].same_text and found["split"].where == "completion"
    assert not found["answer"].same_text and found["cut"].where == "cut"
    assert found["answer"].position == len(in_answer["prompt_token_ids"]) + 1
    assert "X" in found["answer"].server and "X" not in found["answer"].template
    assert found["prompt"].position == 2
    assert "<|im_end|>" in found["end"].template and "<|im_end|>" not in found["end"].server.split("stop")[-1]

    result = CliRunner().invoke(
        cli, ["inspect", str(out), "--tokens", "--tokenizer", str(TINY), "--json", "--examples", "10"]
    )
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert data["differ"] == 5 and data["differ_share"] == round(5 / 6, 4) and data["same_text"] == 1
    assert {e["id"] for e in data["examples"]} == {"answer", "prompt", "end", "split", "cut"}
    text = CliRunner().invoke(cli, ["inspect", str(out), "--tokens", "--tokenizer", str(TINY), "--examples", "10"])
    assert text.exit_code == 0, text.output
    assert "5 of 6 answers (83.3%)" in text.output and "answer: first difference" in text.output
    assert "1 of them the same text split into other tokens" in text.output


def test_round_trip_needs_a_tokenizer(tmp_path: Path, tok: ChatTemplater) -> None:
    out = make_out(tmp_path, completion("a", prompt=USER, **server_ids(tok, USER, "x")))
    result = CliRunner().invoke(cli, ["inspect", str(out), "--tokens"])
    assert isinstance(result.exception, ConfigError) and "--tokenizer" in str(result.exception)


def _overlaps(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    return [1 if any(s < end and e > start for start, end in spans) else 0 for s, e in offsets]


def test_the_span_mask_marks_exactly_the_tokens_that_overlap_a_span() -> None:
    import random

    from tokenmill.export.masks import span_mask

    rng = random.Random(7)
    for _ in range(300):
        offsets, at = [], 0
        for _ in range(rng.randint(0, 60)):
            width = rng.choice((0, 1, 1, 2, 5))  # zero-width tokens and byte pieces of one character included
            at += rng.choice((0, 0, 1))
            offsets.append((at, at + width))
            at += width
        spans = sorted((a, a + rng.randint(0, 12)) for a in rng.sample(range(at + 2), min(3, at + 2)))
        assert span_mask(offsets, spans) == _overlaps(offsets, spans)
    # offsets that go back (not a fast tokenizer's) take the test per token and span
    back = [(0, 3), (3, 6), (1, 2), (6, 9)]
    assert span_mask(back, [(2, 4)]) == _overlaps(back, [(2, 4)]) == [1, 1, 0, 0]


def test_the_template_s_offsets_come_from_the_fast_tokenizer_itself() -> None:
    templater = ChatTemplater(TINY)
    text = templater.render_full([{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "yes"}])
    ids, offsets = templater.encode_offsets(text)
    assert ids == templater.encode(text) and len(offsets) == len(ids)
    assert "".join(text[s:e] for s, e in offsets) == text  # the spans tile the text


def test_the_mask_from_the_encoding_is_the_mask_from_every_offset() -> None:
    import random

    from tokenmill.export.masks import encoding_mask, span_mask

    templater = ChatTemplater(TINY)
    rng = random.Random(3)
    words = ["the", "world", "photosynthesis", "é", "日本", "!", "\n", "  "]
    for _ in range(50):
        text = "".join(rng.choice(words) + rng.choice(["", " "]) for _ in range(40))
        enc = templater.encoding(text)
        starts = sorted(rng.sample(range(len(text)), 3))
        spans = [(s, min(len(text), s + rng.randint(1, 12))) for s in starts]
        spans = [sp for i, sp in enumerate(spans) if i == 0 or sp[0] >= spans[i - 1][1]]
        assert encoding_mask(enc, len(enc.ids), spans) == span_mask(list(enc.offsets), spans), (text, spans)


def test_server_ids_are_ints_whatever_json_number_or_string_holds_them() -> None:
    from tokenmill.export.tokens import _ids

    assert _ids([151644, 0, 7]) == [151644, 0, 7]  # JSON integers: converted in one C pass
    assert _ids(["5", True, 7.0, 2**70]) == [5, 1, 7, 2**70]  # anything else as int() takes it, as before
    assert all(type(t) is int for t in _ids([True, 3]))
