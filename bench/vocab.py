"""A tokenizer the size of Qwen3.6's (a 248,320-token byte-level BPE with a ChatML chat template), built here.

Nothing is downloaded: the BPE is trained on the Python documentation's prose (``pydoc_data.topics``, shipped with
CPython) plus random letter strings that fill the vocabulary to its size, as a multilingual vocabulary's tokens
that English never uses do. The pre-tokenizer is Qwen2/3's (its split pattern, then byte-level), so text splits
and encodes as it does for those models. About 20 s to build on 2 cores; cached in ``.cache/`` by its recipe.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import tempfile
from pathlib import Path

from bench.common import ROOT

VOCAB = 248_320  # Qwen3.6's vocabulary (docs/reference/hardware.md)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Qwen2/3's pre-tokenizer split (their tokenizer.json)
SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MARKER = ".complete"


def prose() -> str:
    """English prose: the Python documentation's topics (about 0.5 MB)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics.values())


def _recipe() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def build(out: Path | None = None) -> Path:
    """The tokenizer directory (``tokenizer.json``, its config and chat template), built once."""
    out = out or ROOT / ".cache" / "bench-tokenizer-248k"
    if (out / MARKER).exists() and (out / MARKER).read_text() == _recipe():
        return out
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    filler = [
        " ".join("".join(rng.choice(letters) for _ in range(rng.randint(5, 12))) for _ in range(50))
        for _ in range(4000)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([prose(), *filler], trainer=trainer)
    # transformers leaves the tokenizer's __init__ unannotated
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[2], pad_token=SPECIALS[0]
    )
    fast.chat_template = CHATML
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".bench-tokenizer-"))
    fast.save_pretrained(tmp)
    (tmp / MARKER).write_text(_recipe())
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


if __name__ == "__main__":
    path = build()
    print(f"{path}: vocabulary {VOCAB:,}")
