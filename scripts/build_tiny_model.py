"""Build a tiny random-weight Llama model and a locally trained tokenizer, for tests against a real engine.

Usage: python scripts/build_tiny_model.py [OUT_DIR]   (default: .cache/tiny-model)

Runs with the engine environment's interpreter (it needs torch, transformers and tokenizers). Nothing is
downloaded: the tokenizer is a byte-level BPE trained on a generated corpus, the weights are random
(``torch.manual_seed(0)``). The build is idempotent: a complete directory whose ``.complete`` marker
matches this script's recipe is left alone; anything else is rebuilt in a temporary directory and moved
into place, so an interrupted build never looks complete.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

DEFAULT_OUT = Path(".cache/tiny-model")
MARKER = ".complete"
VOCAB_SIZE = 512
BOS, IM_START, EOS, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIALS = [BOS, IM_START, EOS, PAD]  # trained first, so their ids are 0, 1, 2, 3
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_WORD_TEXT = (
    "the a an and or but if then when while of to in on at by for with from about into over after "
    "time year people way day man woman child world life hand part place case week company system "
    "program question work government number night point home water room mother area money story "
    "fact month lot right study book eye job word business issue side kind head house service friend "
    "is was are be have do say get make go know take see come think look want give use find tell ask"
)
WORDS = _WORD_TEXT.split()


def recipe_key() -> str:
    """Identifies this recipe: a change to the script rebuilds the model."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def corpus(n_sentences: int = 400) -> list[str]:
    """A deterministic ~20 KB English-like corpus with numbers, questions and chat markup."""
    rng = random.Random(0)
    lines = []
    for i in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        end = "?" if i % 7 == 0 else "."
        lines.append(f"{' '.join(words).capitalize()} {rng.randint(0, 999)}{end}")
    return lines


def build_tokenizer(out: Path) -> int:
    """Train the byte-level BPE, wrap it with a ChatML template and save it; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHATML,
        model_max_length=2048,
    )
    hf_tok.save_pretrained(out)
    return len(hf_tok)


def build_model(out: Path, vocab_size: int) -> int:
    """Save a random-weight 2-layer Llama (head_dim 64, one KV head) in bf16; returns its parameter count."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    ids = {"bos_token_id": SPECIALS.index(BOS), "eos_token_id": SPECIALS.index(EOS)}
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=SPECIALS.index(PAD),
        **ids,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    GenerationConfig(**ids).save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def is_complete(out: Path) -> bool:
    marker = out / MARKER
    return marker.is_file() and marker.read_text().strip() == recipe_key()


def build(out: Path) -> None:
    """Build into a sibling temporary directory, then move it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is not
    try:
        vocab_size = build_tokenizer(tmp)
        n_params = build_model(tmp, vocab_size)
        (tmp / MARKER).write_text(recipe_key() + "\n")
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:
            if not is_complete(out):  # another build finished first: same recipe, same files
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"tiny model: {n_params:,} parameters, vocab {vocab_size}, saved to {out}")


def main(argv: list[str]) -> int:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) == 2 else DEFAULT_OUT
    if is_complete(out):
        print(f"tiny model: {out} is complete, nothing to do")
        return 0
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(
            f"cannot build the tiny model: {exc}. Run this script with the engine environment's "
            "python (make engine, then .engine-venv/bin/python scripts/build_tiny_model.py).",
            file=sys.stderr,
        )
        return 2
    build(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
