"""Check that a running SGLang server decodes greedily exactly like transformers, token for token.

Usage (with the SGLang environment's interpreter, which has torch and transformers)::

    .sglang-venv/bin/python engines/sglang_cpu/check_agreement.py --server http://127.0.0.1:PORT --model DIR

``DIR`` is the model the server serves. The prompts (token ids, from the model's tokenizer) come in three
rounds, each exercising a different part of the server:

1. one at a time, from 3 to ~700 tokens: single-sequence prefill, including prompts longer than a
   linear-attention chunk (64 tokens) and, when the server runs with a small ``--chunked-prefill-size``,
   prefills split over several forward passes; then decode from the state the prefill left;
2. several at once, of different lengths, sent concurrently: varlen prefill batches and decode batches
   with several sequences;
3. prompts that extend earlier prompts plus their outputs: prefix-cache hits, whose states come from the
   cache.

Every request asks ``POST /generate`` for ``--max-new-tokens`` tokens at temperature 0 with ``ignore_eos``;
transformers then generates from the same ids with ``generate(do_sample=False)`` (eager attention, no
end-of-sequence stop) in the dtype the server runs the model in. Prints one line per sequence and a summary;
exits 0 only if every sequence agrees token for token. For a mismatch it shows where and how close
transformers' top two logits were at that step (a near-tie hints at rounding rather than a bug).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORD_TEXT = (
    "the a of to in and on for with from time year people way day man woman child world life hand part place "
    "case week company system program question work number night point home water room mother area money story "
    "fact month lot right study book eye job word business issue side kind head house service friend is was are "
    "have do say get make go know take see come think look want give use find tell ask"
)
WORDS = WORD_TEXT.split()
SINGLE_WORDS = (1, 6, 25, 50, 140, 700)  # prompt sizes in words (about one token each)
CONCURRENT_WORDS = (2, 9, 33, 60, 120, 18)
EXTRA_WORDS = 12  # what a prefix-reuse prompt adds after an earlier prompt and its output
TIMEOUT_S = 300.0


@dataclass
class Case:
    """One prompt, what the server generated for it and what transformers generates."""

    name: str
    prompt: list[int]
    output: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    logprobs: list[float] = field(default_factory=list)
    reference: list[int] = field(default_factory=list)
    reference_logprobs: list[float] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)

    def first_mismatch(self) -> int | None:
        """Index of the first differing token (or of the first missing one), None if they agree."""
        for i, (got, want) in enumerate(zip(self.output, self.reference, strict=False)):
            if got != want:
                return i
        return None if len(self.output) == len(self.reference) else min(len(self.output), len(self.reference))

    def logprob_gap(self) -> float:
        """Largest difference between the two sides' log-probabilities of the tokens both chose."""
        agreed = self.first_mismatch()
        pairs = list(zip(self.logprobs, self.reference_logprobs, strict=False))[:agreed]
        return max((abs(a - b) for a, b in pairs), default=0.0)


# --- prompts ----------------------------------------------------------------------------------------


def text(rng: random.Random, n_words: int) -> str:
    """English-like filler: sentences of random words."""
    words = [rng.choice(WORDS) for _ in range(n_words)]
    return " ".join(words).capitalize() + "."


def encode(tokenizer: Any, value: str) -> list[int]:
    return list(tokenizer(value, add_special_tokens=False)["input_ids"])


def single_cases(tokenizer: Any, rng: random.Random) -> list[Case]:
    cases = [Case(f"single-{n}w", encode(tokenizer, text(rng, n))) for n in SINGLE_WORDS]
    chat = [{"role": "user", "content": text(rng, 15)}]
    rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    cases.append(Case("single-chat", encode(tokenizer, rendered)))
    return cases


def concurrent_cases(tokenizer: Any, rng: random.Random, count: int) -> list[Case]:
    sizes = [CONCURRENT_WORDS[i % len(CONCURRENT_WORDS)] for i in range(count)]
    return [Case(f"batch{i}-{n}w", encode(tokenizer, text(rng, n))) for i, n in enumerate(sizes)]


def reuse_cases(tokenizer: Any, rng: random.Random, earlier: Sequence[Case]) -> list[Case]:
    """Earlier prompt + its output (+ more words): the server can start from a cached prefix."""
    cases = []
    for case in earlier:
        extended = case.prompt + case.output
        cases.append(Case(f"reuse-{case.name}", extended + encode(tokenizer, " " + text(rng, EXTRA_WORDS))))
    cases.append(Case(f"repeat-{earlier[-1].name}", earlier[-1].prompt + earlier[-1].output))
    return cases


# --- the server -------------------------------------------------------------------------------------


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            result: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"POST {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}") from exc
    return result


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        result: dict[str, Any] = json.load(response)
    return result


def serve(server: str, case: Case, max_new_tokens: int) -> None:
    """Greedy generation on the server; fills ``case.output``, ``case.logprobs`` and ``case.cached_tokens``."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    body = {"input_ids": case.prompt, "sampling_params": params, "return_logprob": True}
    reply = post_json(f"{server}/generate", body)
    meta = reply.get("meta_info", {})
    case.output = [int(t) for t in reply["output_ids"]]
    case.logprobs = [float(entry[0]) for entry in meta.get("output_token_logprobs") or []]
    case.cached_tokens = int(meta.get("cached_tokens") or 0)


def serve_concurrently(server: str, cases: Sequence[Case], max_new_tokens: int) -> None:
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        for future in [pool.submit(serve, server, case, max_new_tokens) for case in cases]:
            future.result()


def server_dtype(server: str) -> str:
    """The ``--dtype`` the server was launched with (``auto`` unless set)."""
    return str(get_json(f"{server}/server_info").get("dtype", "auto"))


# --- transformers -----------------------------------------------------------------------------------


def load_reference(model_dir: Path, dtype_name: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype_name), attn_implementation="eager"
    )
    model.generation_config.eos_token_id = None  # like ignore_eos: never stop early
    return model.eval()


def reference_generate(model: Any, case: Case, max_new_tokens: int) -> None:
    """Greedy generation with transformers; fills ``case.reference``, its log-probabilities and each step's
    top-2 logit margin."""
    import torch

    with torch.inference_mode():
        result = model.generate(
            torch.tensor([case.prompt]),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
    case.reference = result.sequences[0, len(case.prompt) :].tolist()
    for token, logits in zip(case.reference, result.logits, strict=True):
        scores = logits[0].float()
        top = torch.topk(scores, 2).values
        case.margins.append(float(top[0] - top[1]))
        case.reference_logprobs.append(float(torch.log_softmax(scores, dim=-1)[token]))


def resolve_dtype(model_dir: Path, launched_with: str, override: str | None) -> str:
    """The dtype the server computes in: its ``--dtype``, else the checkpoint's (SGLang's ``auto`` keeps bf16
    and fp16 but serves a float32 checkpoint as float16, so that case needs ``--dtype float32`` at launch)."""
    if override:
        return override
    if launched_with not in ("auto", ""):
        return launched_with
    config = json.loads((model_dir / "config.json").read_text())
    stored = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    return "float16" if stored == "float32" else stored


# --- report -----------------------------------------------------------------------------------------


def report_line(case: Case) -> str:
    where = case.first_mismatch()
    head = f"{case.name:<22} prompt {len(case.prompt):>4}  cached {case.cached_tokens:>4}  "
    if where is None:
        return head + f"ok ({len(case.output)} tokens, logprobs within {case.logprob_gap():.1e})"
    margin = f", transformers' top-2 logit margin there {case.margins[where]:.2e}" if where < len(case.margins) else ""
    return (
        head + f"MISMATCH at token {where}{margin}\n"
        f"{'':<24}server       {case.output}\n{'':<24}transformers {case.reference}"
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--server", required=True, help="base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", required=True, type=Path, help="the model directory the server serves")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--concurrent", type=int, default=6, help="prompts sent at once in round 2 (default: 6)")
    parser.add_argument("--dtype", help="compute dtype of the reference (default: what the server runs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt text")
    parser.add_argument(
        "--max-logprob-diff",
        type=float,
        help="also fail when a chosen token's log-probability differs by more than this (default: not checked)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    server = args.server.rstrip("/")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rng = random.Random(args.seed)

    singles = single_cases(tokenizer, rng)
    for case in singles:
        serve(server, case, args.max_new_tokens)
    batch = concurrent_cases(tokenizer, rng, args.concurrent)
    serve_concurrently(server, batch, args.max_new_tokens)
    reuse = reuse_cases(tokenizer, rng, [singles[3], singles[4], batch[2]])
    for case in reuse:
        serve(server, case, args.max_new_tokens)
    cases = singles + batch + reuse

    dtype = resolve_dtype(args.model, server_dtype(server), args.dtype)
    model = load_reference(args.model, dtype)
    for case in cases:
        reference_generate(model, case, args.max_new_tokens)

    print(f"model {args.model} ({type(model).__name__}, {dtype}), server {server}")
    for case in cases:
        print(report_line(case))
    failed = [case for case in cases if case.first_mismatch() is not None]
    if args.max_logprob_diff is not None:
        failed += [case for case in cases if case not in failed and case.logprob_gap() > args.max_logprob_diff]
    compared = sum(len(case.reference) for case in cases)
    hits = sum(1 for case in cases if case.cached_tokens > 0)
    verdict = "all agree" if not failed else f"{len(failed)} disagree"
    print(f"{len(cases)} sequences, {compared} generated tokens compared, {hits} with a prefix-cache hit: {verdict}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
