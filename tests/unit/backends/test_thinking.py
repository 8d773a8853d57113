"""The thinking mode: the job's values, the per-id share, what each backend sends and records, the probe's
judgement, the simulated server's reasoning parser, the fleet's parser flag, and the think_markers signal
listed everywhere the other signals are."""

from __future__ import annotations

import hashlib
import inspect as pyinspect
from pathlib import Path

import pytest
import yaml

from tokenmill.backends import BackendOptions, make_backend
from tokenmill.backends.thinking import ThinkingProbe, Where, judge, where_reasoning
from tokenmill.cli.export import export_cmd
from tokenmill.cli.inspect import inspect_cmd
from tokenmill.cli.regenerate import regenerate
from tokenmill.config import FleetSpec, JobSpec, SamplingSpec
from tokenmill.errors import ConfigError
from tokenmill.export import DROP_REASONS
from tokenmill.fleet.template import Slot, render
from tokenmill.quality.registry import FLAGS, SELECTORS
from tokenmill.quality.signals import signals
from tokenmill.records import Generation, Prompt
from tokenmill.sim import api
from tokenmill.sim.text import THINK_CLOSE_ID, THINK_OPEN_ID, plan_output
from tokenmill.sources.thinking import row_thinking, share_point, thinking_for

ROOT = Path(__file__).resolve().parents[3]
BASE = {"input": {"path": "x.jsonl"}, "servers": ["http://s:1"], "output": {"dir": "o"}}


def job(text: str) -> JobSpec:
    return JobSpec.model_validate({**BASE, **yaml.safe_load(text)})


# ---- the job --------------------------------------------------------------------------------------------------


def test_thinking_reads_yaml_on_and_off_shares_and_null() -> None:
    assert job("thinking: on").thinking == "on"  # YAML 1.1 reads on/off as booleans
    assert job("thinking: off").thinking == "off"
    assert job("thinking: 0.25").thinking == 0.25
    assert job("{}").thinking is None
    assert not job("{}").may_think() and not job("thinking: off").may_think() and not job("thinking: 0").may_think()
    assert job("thinking: 0.1").may_think() and job("thinking: on").may_think()


def test_a_switch_in_extra_body_is_the_jobs_mode_and_the_probe_asks_in_it() -> None:
    switch = "sampling: {{extra_body: {{chat_template_kwargs: {{enable_thinking: {}}}}}}}"
    on, off = switch.format("true"), switch.format("false")
    assert job(on).asked_thinking() == "on" and job(on).may_think()
    assert job(off).asked_thinking() == "off" and job(off).thinking_probe_mode() is False
    assert job(f"{{thinking: on, {on}}}").asked_thinking() == "on"  # saying it twice is fine
    assert job("{}").thinking_probe_mode() is None  # unset: the probe sends nothing, the model's default
    assert job("thinking: 0").thinking_probe_mode() is False and job("thinking: 0.5").thinking_probe_mode() is True


@pytest.mark.parametrize("mode", ["off", "0.5"])
def test_a_switch_that_disagrees_with_thinking_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="disagree: set the mode in one place"):
        job(f"{{thinking: {mode}, sampling: {{extra_body: {{chat_template_kwargs: {{enable_thinking: true}}}}}}}}")
    with pytest.raises(ValueError, match="enable_thinking must be true or false"):
        job("sampling: {extra_body: {chat_template_kwargs: {enable_thinking: 'yes'}}}")


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "maybe", "'0.25'"])
def test_a_bad_thinking_value_says_what_is_accepted(bad: str) -> None:
    with pytest.raises(ValueError, match="on, off, a share between 0 and 1, or null"):
        job(f"thinking: {bad}")


def test_thinking_with_a_client_side_template_needs_a_tokenizer() -> None:
    with pytest.raises(ValueError, match="thinking with api: sglang-generate needs a tokenizer"):
        job("{api: sglang-generate, thinking: on}")
    assert job("{api: sglang-generate, thinking: on, tokenizer: tok}").thinking == "on"


# ---- the share --------------------------------------------------------------------------------------------------


def test_a_share_is_a_stable_hash_of_the_id_near_the_share_and_apart_from_the_partitions() -> None:
    ids = [f"row-{i}" for i in range(20_000)]
    on = [i for i in ids if thinking_for(0.3, i)]
    assert 0.28 < len(on) / len(ids) < 0.32
    assert on == [i for i in ids if share_point(i) < 0.3]  # the same every time
    # the partitions of a split run (blake2b(id) mod 2) each get about the share, not all of it or none
    for part in (0, 1):
        mine = [
            i for i in ids if int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "big") % 2 == part
        ]
        assert 0.27 < sum(thinking_for(0.3, i) is True for i in mine) / len(mine) < 0.33
    assert thinking_for("on", "x") is True and thinking_for("off", "x") is False and thinking_for(None, "x") is None


def test_a_rows_column_reads_booleans_and_on_off_and_refuses_the_rest() -> None:
    assert [row_thinking(v, "t") for v in (True, False, None, "on", "OFF", "true")] == [
        True,
        False,
        None,
        True,
        False,
        True,
    ]
    with pytest.raises(ValueError, match="thinking field 't' must be true/false"):
        row_thinking(1, "t")


# ---- what is sent and recorded -------------------------------------------------------------------------------


def _options(**extra: object) -> BackendOptions:
    return BackendOptions(model="m", sampling=SamplingSpec(**extra))  # type: ignore[arg-type]


def test_the_chat_api_sends_enable_thinking_merged_with_the_jobs_template_kwargs() -> None:
    backend = make_backend("openai-chat", _options(extra_body={"chat_template_kwargs": {"custom": 1}}))
    on = backend.body(Prompt(id="a", text="hi", thinking=True))
    assert on["chat_template_kwargs"] == {"custom": 1, "enable_thinking": True}
    off = backend.body(Prompt(id="a", text="hi", thinking=False))
    assert off["chat_template_kwargs"] == {"custom": 1, "enable_thinking": False}
    assert backend.body(Prompt(id="a", text="hi"))["chat_template_kwargs"] == {"custom": 1}
    assert make_backend("openai-chat", _options()).body(Prompt(id="a", text="hi")).get("chat_template_kwargs") is None
    assert backend.thinking_sent(Prompt(id="a", text="hi", thinking=False)) is False


def test_a_completion_api_records_no_mode_for_plain_text_it_sends_as_it_is() -> None:
    backend = make_backend("openai-completions", _options())
    assert backend.thinking_sent(Prompt(id="a", text="hi", thinking=True)) is None
    chat = Prompt(id="a", messages=[{"role": "user", "content": "hi"}], thinking=True)
    assert backend.thinking_sent(chat) is True


# ---- the probe ---------------------------------------------------------------------------------------------------


def _gen(text: str, reasoning: str | None = None) -> Generation:
    return Generation(
        text=text, finish_reason="length", prompt_tokens=5, completion_tokens=9, reasoning_content=reasoning
    )


def test_where_the_reasoning_is() -> None:
    assert where_reasoning(_gen("The answer.", "Let me see")) == "separate"
    assert where_reasoning(_gen("<think>Let me see")) == "inline"
    assert where_reasoning(_gen("Let me see</think>The answer.")) == "inline"  # the template opened the block
    assert where_reasoning(_gen("The answer.")) == "unseen"


def test_the_probe_judges_inline_thinking_unless_intended() -> None:
    inline = ThinkingProbe("http://s:1", "inline", "<think> so", 9)
    with pytest.raises(ConfigError, match="reasoning_parser: qwen3") as caught:
        judge(inline, "openai-chat", inline_ok=False)
    assert "--reasoning-parser" in str(caught.value) and "thinking_inline: ok" in str(caught.value)
    with pytest.raises(ConfigError, match="api sglang-generate returns the text as generated"):
        judge(inline, "sglang-generate", inline_ok=False)
    assert judge(inline, "openai-chat", inline_ok=True)[0] is False  # let through, said in a warning
    assert judge(ThinkingProbe("http://s:1", "separate", "", 9), "openai-chat", inline_ok=False)[0] is True
    fine, said = judge(ThinkingProbe("http://s:1", "unseen", "Hello", 9), "openai-chat", inline_ok=False)
    assert not fine and "shows no reasoning" in said


def test_the_probe_with_thinking_unset_catches_a_model_that_thinks_inline_by_default() -> None:
    with pytest.raises(ConfigError, match="thinks by default") as caught:
        judge(ThinkingProbe("http://s:1", "inline", "<think> so", 9, None), "openai-chat", inline_ok=False)
    assert "set thinking: off" in str(caught.value) and "--reasoning-parser qwen3" in str(caught.value)
    fine, said = judge(ThinkingProbe("http://s:1", "separate", "", 9, None), "openai-chat", inline_ok=False)
    assert fine and "records say thinking: null" in said
    assert judge(ThinkingProbe("http://s:1", "unseen", "391", 9, None), "openai-chat", inline_ok=False)[0] is True


@pytest.mark.parametrize("where", ["inline", "separate"])
def test_the_probe_with_thinking_off_stops_a_model_that_thinks_anyway(where: Where) -> None:
    with pytest.raises(ConfigError, match="thinking: off, but http://s:1 thought anyway") as caught:
        judge(ThinkingProbe("http://s:1", where, "<think> so", 9, False), "openai-chat", inline_ok=True)
    assert "enable_thinking" in str(caught.value) and "set thinking: on" in str(caught.value)
    fine, said = judge(ThinkingProbe("http://s:1", "unseen", "391", 9, False), "openai-chat", inline_ok=False)
    assert fine and "holds no thinking" in said


# ---- the simulated server -------------------------------------------------------------------------------------


def test_the_simulated_parser_splits_as_sglangs_does() -> None:
    split = api.split_reasoning
    assert split("<think> a b </think> c", None, True) == (None, "<think> a b </think> c")
    assert split("<think> a b </think> c", "qwen3", None) == (" a b ", " c")
    assert split("<think> a b", "qwen3", True) == (" a b", "")  # cut off: all reasoning, no content
    assert split("plain answer", "qwen3", None) == ("plain answer", "")  # a template with no switch forces it
    assert split("plain answer", "qwen3", False) == (None, "plain answer")
    assert split("plain answer", "qwen3-thinking", False) == ("plain answer", "")
    assert split("a </think> b", "deepseek-r1", None) == ("a ", " b")


def test_a_thinking_answer_opens_and_closes_its_block_and_keeps_its_length() -> None:
    plain = plan_output(7, 400, ignore_eos=False, mean=60, sigma=0.0)
    thought = plan_output(7, 400, ignore_eos=False, mean=60, sigma=0.0, think_share=0.5)
    assert len(thought.token_ids) == len(plain.token_ids) == 60 and thought.finish == "stop"
    assert thought.token_ids[0] == THINK_OPEN_ID and thought.token_ids[31] == THINK_CLOSE_ID
    cut = plan_output(7, 20, ignore_eos=False, mean=60, sigma=0.0, think_share=0.5)
    assert cut.finish == "length" and THINK_CLOSE_ID not in cut.token_ids


def test_the_simulated_server_reads_enable_thinking_and_an_empty_thinking_block() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"enable_thinking": False}}
    assert api.parse_chat(body, 4096).thinking is False
    assert api.parse_chat({"messages": [{"role": "user", "content": "q"}]}, 4096).thinking is None
    off = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert api.parse_completion({"prompt": off, "max_tokens": 4}, 4096).thinking is False


# ---- the fleet ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm", "sim"])
def test_a_profiles_reasoning_parser_is_the_engines_flag(engine: str) -> None:
    profile = FleetSpec.model_validate(
        {"engine": engine, "model": "m", "reasoning_parser": "qwen3", "sglang_version": "0.5.23"}
    )
    argv = render(profile, Slot(0, (0,), "127.0.0.1", 30000), python="python")
    at = argv.index("--reasoning-parser")
    assert argv[at + 1] == "qwen3"


def test_a_reasoning_parser_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="give the reasoning parser once"):
        FleetSpec.model_validate(
            {"engine": "sglang", "model": "m", "reasoning_parser": "qwen3", "flags": {"reasoning-parser": "x"}}
        )


# ---- the signal, and every list of signals -------------------------------------------------------------------


def test_think_markers_mark_thinking_left_in_the_answer_only() -> None:
    assert signals("<think>so</think>The answer.", "stop").flags() == ["think_markers"]
    assert signals("so</think>The answer.", "stop").flags() == ["think_markers"]
    assert signals("The answer.", "stop", "so").flags() == []
    assert signals("a < b, and b > c", "stop").flags() == []


def test_every_list_of_signals_names_every_signal() -> None:
    assert set(FLAGS) <= set(SELECTORS) and set(FLAGS) <= set(DROP_REASONS)
    helps = {
        "export --drop": next(p.help for p in export_cmd.params if p.name == "drop"),
        "regenerate --where": next(p.help for p in regenerate.params if p.name == "where"),
        "inspect": pyinspect.getdoc(inspect_cmd.callback),
    }
    quality_doc = (ROOT / "docs" / "quality.md").read_text()
    for flag in FLAGS:
        for where, text in helps.items():
            assert text is not None and flag in text, (flag, where)
        assert f"| `{flag}` |" in quality_doc, flag


def test_the_mode_is_part_of_the_jobs_identity_only_when_set() -> None:
    from tokenmill.output.identity import _identity, fingerprint

    plain = job("{}")
    assert "thinking" not in _identity(plain) and "thinking_field" not in _identity(plain)["input"]
    assert fingerprint(job("thinking: on")) != fingerprint(job("thinking: off")) != fingerprint(plain)
    assert fingerprint(job("{input: {path: x.jsonl, thinking_field: t}}")) != fingerprint(plain)


def test_the_start_line_says_the_mode() -> None:
    from tokenmill.sources.thinking import describe

    assert describe(None, None) is None
    assert describe(0.3, None) == "thinking: on for 30% of the rows (by id)"
    assert describe("off", "think") == "thinking: off; a row's 'think' column wins"
