"""Client-side chat templates with a tiny tokenizer built here (byte-level BPE, ChatML template)."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from tokenmill.backends.templating import ChatTemplater
from tokenmill.errors import ConfigError, PermanentError

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
pytest.importorskip("jinja2")

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "Explain the water cycle to a child, in three sentences. ",
    "You are a helpful assistant; answer briefly and clearly. ",
] * 40  # a few KB


def _save_tokenizer(directory: Path, chat_template: str | None) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(CORPUS, trainer)
    # transformers leaves the tokenizer's __init__ unannotated
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tokenizer(tmp_path_factory.mktemp("chatml"), CHATML)


def test_render_applies_the_template_with_the_generation_prompt(chatml_dir: Path) -> None:
    templater = ChatTemplater(chatml_dir)
    text = templater.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )


def test_encode_maps_special_tokens_to_single_ids_and_round_trips(chatml_dir: Path) -> None:
    from tokenizers import Tokenizer

    templater = ChatTemplater(str(chatml_dir))
    text = templater.render([{"role": "user", "content": "The lazy fox"}])
    ids = templater.encode(text)
    assert all(isinstance(i, int) for i in ids)
    raw = Tokenizer.from_file(str(chatml_dir / "tokenizer.json"))
    start, end = raw.token_to_id("<|im_start|>"), raw.token_to_id("<|im_end|>")
    assert start is not None and end is not None
    assert ids[0] == start and ids.count(start) == 2 and ids.count(end) == 1  # added once each, not as text
    assert raw.decode(ids, skip_special_tokens=False) == text


def test_missing_transformers_asks_for_the_extra(monkeypatch: pytest.MonkeyPatch, chatml_dir: Path) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "transformers" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=r"need transformers: pip install 'tokenmill\[tokenizer\]'"):
        ChatTemplater(chatml_dir)


def test_a_directory_without_a_tokenizer_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds no tokenizer \(tokenizer\.json, .*\); point `tokenizer:` at"):
        ChatTemplater(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")  # present but unusable: transformers' reason is kept
    with pytest.raises(ConfigError, match=r"no usable tokenizer at .*\(ValueError: .*\); point `tokenizer:` at"):
        ChatTemplater(tmp_path)


def test_missing_path_and_file_path_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist; check `tokenizer:`"):
        ChatTemplater(tmp_path / "nope")
    file = tmp_path / "tokenizer.json"
    file.write_text("{}")
    with pytest.raises(ConfigError, match=r"is a file; set `tokenizer:` to the directory that holds it"):
        ChatTemplater(file)


def test_uncached_model_id_is_a_config_error_without_network() -> None:
    with pytest.raises(ConfigError, match=r"no usable tokenizer at 'no-such-org/no-such-model'.*nothing is downloaded"):
        ChatTemplater("no-such-org/no-such-model")


def test_a_tokenizer_without_chat_template_is_a_config_error(tmp_path: Path) -> None:
    plain = _save_tokenizer(tmp_path / "plain", None)
    with pytest.raises(ConfigError, match=r"has no chat template"):
        ChatTemplater(plain)


def test_a_template_that_rejects_one_conversation_fails_only_that_prompt(tmp_path: Path) -> None:
    strict = (
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first turn must be user') }}{% endif %}" + CHATML
    )
    templater = ChatTemplater(_save_tokenizer(tmp_path / "strict", strict))
    assert templater.render([{"role": "user", "content": "ok"}]).startswith("<|im_start|>user")
    with pytest.raises(PermanentError, match=r"cannot render this conversation .*first turn must be user"):
        templater.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])


QWEN3_SWITCH = CHATML + (
    "{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}"
)


def test_render_passes_the_thinking_mode_to_the_template_as_enable_thinking(tmp_path: Path) -> None:
    templater = ChatTemplater(_save_tokenizer(tmp_path / "qwen3", QWEN3_SWITCH))
    messages = [{"role": "user", "content": "hi"}]
    off = templater.render(messages, thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = templater.render(messages, thinking=True)
    assert on == templater.render(messages) == off.removesuffix("<think>\n\n</think>\n\n")
