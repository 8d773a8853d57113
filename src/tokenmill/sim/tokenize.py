"""Prompt lengths for the simulated server: counted with the model's own tokenizer when ``--model-spec`` names a
model directory (or a ``config.json`` in one) holding a ``tokenizer.json``, as the real server counts them;
otherwise estimated (:func:`tokenmill.sim.text.estimate_tokens`).

Token ids sent with ``input_ids`` are always counted as sent. The chat routes count the simulator's rendering of
the messages, which need not be the model's chat template token for token.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenmill.errors import ConfigError

TOKENIZER_FILE = "tokenizer.json"

Encoder = Callable[[str], list[int]]


def tokenizer_file(model_spec: str | None) -> Path | None:
    """The ``tokenizer.json`` beside ``model_spec`` (a directory or a file in one), if there is one."""
    if not model_spec:
        return None
    spec = Path(model_spec)
    folder = spec if spec.is_dir() else spec.parent
    path = folder / TOKENIZER_FILE
    return path if spec.exists() and path.is_file() else None


def prompt_encoder(model_spec: str | None) -> Encoder | None:
    """The token ids of a text prompt with ``model_spec``'s tokenizer; None where the prompt is estimated (no
    tokenizer beside it, or the ``tokenizer`` extra not installed)."""
    path = tokenizer_file(model_spec)
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer  # optional extra: tokenmill[tokenizer]
    except ImportError:
        return None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception type for a bad file
        raise ConfigError(f"{path}: not a tokenizer the tokenizers library can read ({exc}); fix or remove it") from exc

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    return encode
