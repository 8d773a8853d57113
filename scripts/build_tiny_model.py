"""Build a tiny random-weight model and a locally trained tokenizer, for tests against a real engine.

Usage: python scripts/build_tiny_model.py [--kind dense|hybrid] [OUT_DIR]
       (default kind: dense; default OUT_DIR: .cache/tiny-model for dense, .cache/tiny-hybrid for hybrid)

Two kinds share one tokenizer: ``dense`` is a 2-layer Llama in bf16; ``hybrid`` is a Qwen3-Next model
(``Qwen3NextForCausalLM``: 3 Gated-DeltaNet layers and 1 full-attention layer, every MLP a small MoE with a
shared expert) in float32, for exercising an engine's linear-attention state cache.

Runs with the engine environment's interpreter (it needs torch, transformers and tokenizers). Nothing is
downloaded: the tokenizer is a byte-level BPE trained on a generated corpus, the weights are random
(``torch.manual_seed(0)``). The build is idempotent: a complete directory whose ``.complete`` marker
matches this script's recipe for that kind is left alone; anything else is rebuilt in a temporary directory
and moved into place, so an interrupted build never looks complete.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

DEFAULT_OUT = {"dense": Path(".cache/tiny-model"), "hybrid": Path(".cache/tiny-hybrid")}
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
FULL_ATTENTION_INTERVAL = 4  # hybrid: every 4th layer is full attention, the others Gated DeltaNet
HYBRID_DTYPE = "float32"


def recipe_key(kind: str) -> str:
    """Identifies this recipe for one kind: a change to the script rebuilds the model."""
    return hashlib.sha256(Path(__file__).read_bytes() + kind.encode()).hexdigest()[:16]


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


def build_dense(out: Path, vocab_size: int) -> int:
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


def build_hybrid(out: Path, vocab_size: int) -> int:
    """Save a random-weight 4-layer Qwen3-Next (3 Gated-DeltaNet + 1 attention layer, MoE MLPs) in float32.

    float32, not bf16: the engine's greedy tokens are checked against transformers' token for token, and a
    random model's logits are so flat that in bf16 the top two often tie or differ by one rounding step, which
    two implementations that round differently break in different directions. Serve it with ``--dtype
    float32``: SGLang's ``auto`` runs a float32 checkpoint in float16. Returns the parameter count.
    """
    import torch
    from transformers import GenerationConfig, Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    ids = {"bos_token_id": SPECIALS.index(BOS), "eos_token_id": SPECIALS.index(EOS)}
    cfg = Qwen3NextConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,  # unused: every layer's MLP is a MoE (decoder_sparse_step 1)
        num_hidden_layers=4,
        full_attention_interval=FULL_ATTENTION_INTERVAL,  # layers 0-2 Gated DeltaNet, layer 3 attention
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        max_position_embeddings=2048,
        pad_token_id=SPECIALS.index(PAD),
        dtype=HYBRID_DTYPE,
        **ids,
    )
    model = Qwen3NextForCausalLM(cfg).to(getattr(torch, HYBRID_DTYPE))
    model.save_pretrained(out)
    GenerationConfig(**ids).save_pretrained(out)
    add_full_attention_interval(out / "config.json")
    return sum(p.numel() for p in model.parameters())


def add_full_attention_interval(config_json: Path) -> None:
    """SGLang derives the hybrid layer layout from ``full_attention_interval``; transformers writes only
    ``layer_types``, so the interval is added back (after checking it says the same)."""
    config = json.loads(config_json.read_text())
    expected = [
        "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
        for i in range(config["num_hidden_layers"])
    ]
    if config.get("layer_types") != expected:
        raise RuntimeError(f"unexpected layer_types {config.get('layer_types')}, wanted {expected}")
    config["full_attention_interval"] = FULL_ATTENTION_INTERVAL
    config_json.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


BUILDERS = {"dense": build_dense, "hybrid": build_hybrid}


def is_complete(out: Path, kind: str) -> bool:
    marker = out / MARKER
    return marker.is_file() and marker.read_text().strip() == recipe_key(kind)


def build(out: Path, kind: str) -> None:
    """Build into a sibling temporary directory, then move it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is not
    try:
        vocab_size = build_tokenizer(tmp)
        n_params = BUILDERS[kind](tmp, vocab_size)
        (tmp / MARKER).write_text(recipe_key(kind) + "\n")
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:
            if not is_complete(out, kind):  # another build finished first: same recipe, same files
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"tiny {kind} model: {n_params:,} parameters, vocab {vocab_size}, saved to {out}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=Path(argv[0]).name, description="Build a tiny random-weight model and its tokenizer."
    )
    parser.add_argument("--kind", choices=sorted(BUILDERS), default="dense", help="which model (default: dense)")
    parser.add_argument(
        "out", nargs="?", type=Path, help="output directory (default: .cache/tiny-model or .cache/tiny-hybrid)"
    )
    return parser.parse_args(argv[1:])


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    kind: str = args.kind
    out: Path = args.out or DEFAULT_OUT[kind]
    if is_complete(out, kind):
        print(f"tiny {kind} model: {out} is complete, nothing to do")
        return 0
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(
            f"cannot build the tiny model: {exc}. Run this script with an engine environment's python "
            "(make engine, then .engine-venv/bin/python scripts/build_tiny_model.py; or .sglang-venv/bin/python).",
            file=sys.stderr,
        )
        return 2
    build(out, kind)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
