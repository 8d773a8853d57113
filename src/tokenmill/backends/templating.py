"""Client-side chat templates: render a conversation to the text a completion API expects.

Used when the server is sent text or token ids (``sglang-generate``, ``openai-completions``) but the
prompt is a conversation. The tokenizer is read from a local directory (``tokenizer.json``,
``tokenizer_config.json`` and the chat template, as saved by ``save_pretrained``), or by model id from the
local Hugging Face cache; nothing is fetched from the Hub.
Needs the optional extra: ``pip install 'tokenmill[tokenizer]'``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tokenmill.errors import ConfigError, PermanentError
from tokenmill.records import Message

_INSTALL_HINT = "pip install 'tokenmill[tokenizer]'"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


class ChatTemplater:
    """A tokenizer with a chat template, loaded once from a local directory."""

    def __init__(self, tokenizer_path: str | Path) -> None:
        self.path = Path(tokenizer_path)
        self._tokenizer = _load(self.path)

    def render(self, messages: list[Message], thinking: bool | None = None) -> str:
        """The conversation as text, ending with the assistant prefix (``add_generation_prompt=True``); a
        ``thinking`` mode is passed to the template as ``enable_thinking`` (Qwen3's switch; templates without it
        ignore it), None passes nothing.

        A template that rejects a conversation (many raise on, e.g., roles that do not alternate) makes a
        PermanentError: that prompt fails and is recorded, the run goes on.
        """
        try:
            extra = {} if thinking is None else {"enable_thinking": thinking}
            text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
        except Exception as exc:  # jinja2 errors, raise_exception() in the template, type errors
            raise PermanentError(
                f"the chat template of {self.path} cannot render this conversation ({type(exc).__name__}: "
                f"{exc}); check that the tokenizer matches the model and the data"
            ) from exc
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; no special tokens are added (a rendered template already holds them)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def render_full(self, messages: list[Message], *, generation_prompt: bool = False) -> str:
        """The whole conversation as text (a finished one: no assistant prefix unless ``generation_prompt``);
        a conversation the template rejects is a :class:`PermanentError`, as for :meth:`render`."""
        try:
            text = self._tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt
            )
        except Exception as exc:  # jinja2 errors, raise_exception() in the template, type errors
            raise PermanentError(
                f"the chat template of {self.path} cannot render this conversation ({type(exc).__name__}: {exc})"
            ) from exc
        return str(text)

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of ``text`` with each token's character span (a fast tokenizer's offset mapping)."""
        enc = self.encoding(text)
        return list(enc.ids), list(enc.offsets)

    def encoding(self, text: str) -> Any:
        """The fast tokenizer's own encoding of ``text`` (``tokenizers.Encoding``: ids, and a token's characters or
        a character's token on demand, with no list of every offset built), no special tokens added."""
        backend = getattr(self._tokenizer, "backend_tokenizer", None)
        if backend is None:  # slow (Python) tokenizers have no offsets
            raise ConfigError(
                f"the tokenizer in {self.path} gives no character offsets (a slow tokenizer); save the model's "
                "fast tokenizer (tokenizer.json) there"
            )
        return backend.encode(text, add_special_tokens=False)  # the Rust tokenizer itself

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens shown."""
        return str(self._tokenizer.decode(ids, skip_special_tokens=False))

    @property
    def special_tokens(self) -> list[str]:
        """The tokenizer's special and added token strings (end-of-turn markers among them), longest first."""
        names = set(self._tokenizer.all_special_tokens) | set(self._tokenizer.get_added_vocab())
        return sorted((n for n in names if n), key=len, reverse=True)

    def token_id(self, token: str) -> int | None:
        """The id of one token string, or None when the vocabulary has no such token."""
        found = self._tokenizer.convert_tokens_to_ids(token)
        return found if isinstance(found, int) and found != self._tokenizer.unk_token_id else None

    @property
    def eos_token(self) -> str | None:
        """The tokenizer's end-of-sequence token (ChatML models: ``<|im_end|>``), if it has one."""
        token = self._tokenizer.eos_token
        return str(token) if token else None


def _load(path: Path) -> Any:
    missing = [name for name in ("transformers", "jinja2") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"client-side chat templates need {' and '.join(missing)}: {_INSTALL_HINT} "
            "(or use api: openai-chat, where the server applies the template)"
        )
    if path.exists() and not path.is_dir():
        raise ConfigError(f"tokenizer {str(path)!r} is a file; set `tokenizer:` to the directory that holds it")
    if not path.exists() and (path.is_absolute() or str(path).startswith(".")):
        raise ConfigError(f"tokenizer directory {str(path)!r} does not exist; check `tokenizer:`")
    if path.is_dir() and not any((path / name).exists() for name in _TOKENIZER_FILES):
        raise ConfigError(
            f"{path} holds no tokenizer ({', '.join(_TOKENIZER_FILES)}); point `tokenizer:` at the model's "
            "directory, or save one there with tokenizer.save_pretrained()"
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError or KeyError for unusable directories
        raise ConfigError(
            f"no usable tokenizer at {str(path)!r} ({type(exc).__name__}: {' '.join(str(exc).split())}); "
            "point `tokenizer:` at a directory with tokenizer.json and tokenizer_config.json (or a model id "
            "already in the local Hugging Face cache; nothing is downloaded)"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"the tokenizer in {path} has no chat template; use a chat model's tokenizer, "
            "or send plain text prompts (mapping: prompt)"
        )
    return tokenizer
