"""Row → Prompt: every mapping, turn selection, system prompts, ids and what is kept for export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenmill.config import InputSpec
from tokenmill.records import Prompt, Skip
from tokenmill.sources import iter_prompts

SYSTEM = {"from": "system", "value": "Be brief."}
CHAT = [
    {"from": "gpt", "value": "Welcome!"},
    {"from": "human", "value": "first question"},
    {"from": "gpt", "value": "first answer"},
    {"from": "human", "value": "second question"},
    {"from": "gpt", "value": "second answer"},
]


def _one(tmp_path: Path, row: dict[str, Any], **spec: Any) -> Prompt | Skip:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (item,) = iter_prompts(InputSpec.model_validate({"path": str(path), "on_bad_row": "skip", **spec}))
    return item


def _messages(item: Prompt | Skip) -> list[dict[str, Any]] | None:
    assert isinstance(item, Prompt), item
    return item.messages


def test_sharegpt_first_turn_keeps_system_and_first_user_turn(tmp_path: Path) -> None:
    row = {"conversations": [SYSTEM, *CHAT]}
    item = _one(tmp_path, row, conversation_turns="first")
    assert _messages(item) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
    ]
    assert isinstance(item, Prompt) and item.text is None and item.followups is None
    assert item.meta == {"row": row, "user_turns": 2}  # the original turns, for export; the feed counts the turns


def test_every_user_turn_is_regenerated_by_default(tmp_path: Path) -> None:
    """Without input.conversation_turns the first user turn is the prompt and each later one a follow-up, answered
    in turn (on-policy multi-turn); the original answers and a greeting before the first user turn are not sent."""
    item = _one(tmp_path, {"conversations": [SYSTEM, *CHAT]})
    assert _messages(item) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
    ]
    assert isinstance(item, Prompt) and item.followups == [{"role": "user", "content": "second question"}]
    assert item.meta is not None and item.meta["user_turns"] == 2
    single = _one(tmp_path, {"conversations": CHAT[:3]})
    assert isinstance(single, Prompt) and single.followups is None and single.meta is not None
    assert "user_turns" not in single.meta


def test_sharegpt_history_keeps_everything_up_to_the_last_user_turn(tmp_path: Path) -> None:
    item = _one(tmp_path, {"conversations": CHAT}, conversation_turns="history")
    assert _messages(item) == [
        {"role": "assistant", "content": "Welcome!"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]


def test_conversations_accept_role_content_turns_and_aliases(tmp_path: Path) -> None:
    turns = [
        {"role": "system", "content": "s"},
        {"from": "user", "value": "u1"},
        {"from": "chatgpt", "value": "a1"},
        {"role": "user", "content": "u2"},
        # Parquet/datasets rows carry every struct field, null where absent.
        {"from": None, "value": None, "role": "assistant", "content": "a2"},
    ]
    item = _one(tmp_path, {"conversations": turns}, conversation_turns="history")
    assert [(m["role"], m["content"]) for m in _messages(item) or []] == [
        ("system", "s"),
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u2"),
    ]


def test_openai_messages_are_normalised_to_role_and_content(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi", "name": "bob"}, {"role": "assistant", "content": "yo"}]
    item = _one(tmp_path, {"messages": messages})
    assert _messages(item) == [{"role": "user", "content": "hi"}]


def test_messages_mapping_rejects_sharegpt_role_names(tmp_path: Path) -> None:
    item = _one(tmp_path, {"messages": [{"role": "human", "content": "hi"}]})
    assert isinstance(item, Skip)
    assert item.reason == "messages[0] has unknown role 'human' (expected one of: system, user, assistant)"


def test_system_prompt_is_prepended_only_when_the_row_has_none(tmp_path: Path) -> None:
    with_system = _one(tmp_path, {"conversations": [SYSTEM, *CHAT]}, system_prompt="Default.")
    assert [m["content"] for m in _messages(with_system) or []] == ["Be brief.", "first question"]
    without = _one(tmp_path, {"conversations": CHAT}, system_prompt="Default.")
    assert _messages(without) == [
        {"role": "system", "content": "Default."},
        {"role": "user", "content": "first question"},
    ]


def test_plain_prompt_is_text_or_system_plus_user_messages(tmp_path: Path) -> None:
    plain = _one(tmp_path, {"prompt": "Say hi."})
    assert isinstance(plain, Prompt)
    assert (plain.text, plain.messages, plain.meta) == ("Say hi.", None, None)
    with_system = _one(tmp_path, {"prompt": "Say hi."}, system_prompt="Be kind.")
    assert isinstance(with_system, Prompt) and with_system.text is None
    assert with_system.messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Say hi."},
    ]


def test_auto_mapping_prefers_messages_then_conversations_then_prompt(tmp_path: Path) -> None:
    both = {"messages": [{"role": "user", "content": "m"}], "conversations": CHAT, "prompt": "p"}
    assert _messages(_one(tmp_path, both)) == [{"role": "user", "content": "m"}]
    no_messages = {"messages": None, "conversations": CHAT, "prompt": "p"}
    assert _messages(_one(tmp_path, no_messages)) == [{"role": "user", "content": "first question"}]
    only_prompt = _one(tmp_path, {"prompt": "p", "other": 1})
    assert isinstance(only_prompt, Prompt) and only_prompt.text == "p"


def test_explicit_mapping_and_custom_field_names(tmp_path: Path) -> None:
    row = {"question": "Why?", "dialog": [{"from": "human", "value": "d"}], "uid": 42}
    as_text = _one(tmp_path, row, mapping="prompt", prompt_field="question", id_field="uid")
    assert isinstance(as_text, Prompt) and (as_text.id, as_text.text) == ("42", "Why?")
    as_chat = _one(tmp_path, row, mapping="conversations", conversations_field="dialog")
    assert _messages(as_chat) == [{"role": "user", "content": "d"}]
    missing = _one(tmp_path, row, mapping="messages")
    assert isinstance(missing, Skip)
    assert missing.reason == "missing field 'messages' (input.mapping is 'messages')"


@pytest.mark.parametrize(
    ("turns", "reason"),
    [
        ([{"from": "human", "value": " \n"}], "empty prompt: conversations[0] (a user turn) is empty"),
        ([{"value": "x"}], "conversations[0] has no 'from'"),
        ([{"from": "human"}], "conversations[0] has no 'value'"),
        ([{"from": 3, "value": "x"}], "conversations[0].from must be a string, got integer"),
        ([{"from": "human", "value": ["x"]}], "conversations[0].value must be a string, got array"),
    ],
)
def test_turn_problems_are_named_precisely(tmp_path: Path, turns: list[Any], reason: str) -> None:
    item = _one(tmp_path, {"conversations": turns})
    assert isinstance(item, Skip)
    assert item.reason == reason


def test_history_mode_checks_every_kept_user_turn(tmp_path: Path) -> None:
    turns = [{"from": "human", "value": ""}, {"from": "gpt", "value": "a"}, {"from": "human", "value": "q"}]
    assert isinstance(_one(tmp_path, {"conversations": turns}, conversation_turns="history"), Skip)
    trailing_empty_answer = [{"from": "human", "value": "q"}, {"from": "gpt", "value": ""}]
    assert _messages(_one(tmp_path, {"conversations": trailing_empty_answer})) == [{"role": "user", "content": "q"}]


def test_id_field_accepts_strings_and_integers_only(tmp_path: Path) -> None:
    good = _one(tmp_path, {"id": 7, "prompt": "p"}, id_field="id")
    assert isinstance(good, Prompt) and good.id == "7"
    for bad, reason in [
        (True, "id field 'id' must be a string or an integer, got boolean"),
        ("", "id field 'id' is empty"),
        ({"a": 1}, "id field 'id' must be a string or an integer, got object"),
    ]:
        item = _one(tmp_path, {"id": bad, "prompt": "p"}, id_field="id")
        assert isinstance(item, Skip) and item.reason == reason and item.id is None
