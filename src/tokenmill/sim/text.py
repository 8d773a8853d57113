"""Deterministic pseudo-text and token ids for the simulated server.

One token is about four characters, everywhere: :func:`estimate_tokens` counts a prompt that way for usage
and context checks, and generated text is made of three-letter words joined by spaces, so ``n`` output
tokens always read back as ``n`` tokens. Output token ids map one-to-one onto those words
(:func:`decode`); prompt token ids are a cheap hash of each four-character chunk.

Everything a completion holds (its length, its words) is drawn from a key that hashes the simulator seed
and the prompt content, so the same prompt gets the same answer from every run with the same seed.
"""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tokenmill.config import SimSpec

CHARS_PER_TOKEN = 4
EOS_TOKEN_ID = 2
"""Reported as ``matched_stop`` / ``finish_reason.matched`` when a completion ends naturally."""

# a neutral vocabulary of common three-letter English words: what a newcomer reads in the demo's output
_VOCABULARY = """
    act add age ago aid aim air all and any apt arc are arm art ask bag bay bed bee big bin bit box boy bud bus
    but buy cab can cap car cat cow cry cub cup cut day den dew did dig dim dip doe dog dot dry due dug dye ear
    eat egg elk elm end era eve eye fan far fed fee few fig fin fir fit fix fly fog for fox fun fur gap gas gel
    gem get gum guy gym had has hat hay hen her hid him hip his hit hop hot how hub hue hug hum hut ice icy ink
    inn ion its ivy jam jar jaw jet job jog joy jug key kid kin kit lab lap law lay led leg let lid lip lit log
    lot low map mat may mix mop mud mug nap net new nod nor not now oak oar oat odd off oil old one opt orb ore
    our out owl own pad pal pan paw pay pea peg pen pet pie pig pin pit pod pop pry pun pup put rag ram ran raw
    ray red rib rim rod row rub rug run rye sap sat saw say sea see set sew she shy sip sit six ski sky sly sod
    son sow soy spa sum sun tab tag tan tap tar tax tea ten the tie tin tip toe ton too top tow toy try tub tug
    two urn use van vat vet via vow wag was wax way web wed wet who wig win wit won yak yam yes yet you zip zoo
"""
WORDS: tuple[str, ...] = tuple(_VOCABULARY.split())
WORD_CHARS = 3  # every word; generated text is words joined by single spaces
OUTPUT_ID_BASE = 1000
"""Output token id of ``WORDS[0]``; ids below it are reserved (EOS, the thinking tags, prompt-only ids never
collide)."""
THINK_OPEN_ID, THINK_CLOSE_ID = 3, 4
SPECIAL_TEXT = {THINK_OPEN_ID: "<think>", THINK_CLOSE_ID: "</think>"}
"""Reserved output ids with their text: an answer that opens a thinking block (and, looping, never closes it)."""
VOCAB_SIZE = 32000
_PROMPT_ID_SPAN = VOCAB_SIZE - OUTPUT_ID_BASE

FinishKind = Literal["stop", "length"]
Degeneration = Literal["loop", "empty", "unclosed_think"]
LOOP_PHRASE_WORDS = (3, 12)  # a looping answer repeats one phrase of this many words until max_new_tokens


@dataclass(frozen=True, slots=True)
class Draft:
    """A planned completion: its token ids, their text, why it ended, and what stopped it (a stop string, or
    the EOS token id when it ended naturally; ``None`` at the length limit)."""

    token_ids: list[int]
    text: str
    finish: FinishKind
    matched: str | int | None = None


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at :data:`CHARS_PER_TOKEN` characters each (at least 1)."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def prompt_token_ids(text: str) -> list[int]:
    """Token ids for ``text``: one per four-character chunk, ``len == estimate_tokens(text)``."""
    if not text:
        return [OUTPUT_ID_BASE]
    step = CHARS_PER_TOKEN
    return [
        OUTPUT_ID_BASE + zlib.crc32(text[i : i + step].encode()) % _PROMPT_ID_SPAN for i in range(0, len(text), step)
    ]


def _word(token_id: int) -> str:
    special = SPECIAL_TEXT.get(token_id)
    return special if special is not None else WORDS[(token_id - OUTPUT_ID_BASE) % len(WORDS)]


def decode(token_ids: Iterable[int]) -> str:
    """The text of output token ids made by :func:`plan_output` (the EOS token has none, as a tokenizer decodes
    with ``skip_special_tokens``)."""
    return " ".join(_word(i) for i in token_ids if i != EOS_TOKEN_ID)


def content_key(
    seed: int, prompt: str | Sequence[int], request_seed: int | None = None, penalized: bool = False
) -> int:
    """A 64-bit key from the simulator seed, the prompt (text or ids), an optional per-request seed, and whether
    the request penalizes repeats (a penalty changes what is sampled, so it draws another answer)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{seed}:{request_seed}:{'penalized:' if penalized else ''}".encode())
    if isinstance(prompt, str):
        h.update(prompt.encode("utf-8", "surrogatepass"))
    else:
        h.update(b"ids:" + ",".join(map(str, prompt)).encode())
    return int.from_bytes(h.digest(), "little")


def draw_length(rng: random.Random, mean: float, sigma: float) -> int:
    """A log-normal length whose mean is ``mean`` (at least 1)."""
    if sigma <= 0:
        return max(1, round(mean))
    mu = math.log(mean) - sigma * sigma / 2
    return max(1, round(rng.lognormvariate(mu, sigma)))


def plan_output(
    key: int,
    max_new_tokens: int,
    *,
    ignore_eos: bool,
    mean: float,
    sigma: float,
    stop: Sequence[str] = (),
    degeneration: Degeneration | None = None,
    think_share: float | None = None,
) -> Draft:
    """The completion for ``key``: a drawn length capped by ``max_new_tokens`` (then ``finish == "length"``),
    cut at the first stop string as SGLang cuts it (the text ends before the match; the ids keep the token
    that completed it).

    A ``degeneration`` makes the answer one a sampling model sometimes gives: ``loop`` (a phrase repeated until
    ``max_new_tokens``, after a drawn share of normal words), ``empty`` (the end of sequence at once),
    ``unclosed_think`` (a thinking block that runs to ``max_new_tokens`` without closing).

    With ``think_share`` the answer is a thinking model's: ``<think>``, reasoning (that share of the drawn length),
    ``</think>``, then the answer, the same length in all; reasoning cut at ``max_new_tokens`` never closes."""
    rng = random.Random(key)
    natural = draw_length(rng, mean, sigma)
    if degeneration == "empty":  # the end of sequence at once: one token, as a real server counts it
        return Draft(token_ids=[EOS_TOKEN_ID], text="", finish="stop", matched=EOS_TOKEN_ID)
    finish: FinishKind = "length" if ignore_eos or natural >= max_new_tokens or degeneration else "stop"
    n = max_new_tokens if finish == "length" else natural
    body = n - 1 if finish == "stop" else n  # an answer that ends by itself ends with the EOS token, one of its n
    ids = [OUTPUT_ID_BASE + i for i in rng.choices(range(len(WORDS)), k=body)]
    if degeneration == "loop" and body:
        start = rng.randrange(body // 2 + 1)
        phrase = ids[start : start + rng.randint(*LOOP_PHRASE_WORDS)]
        ids[start:] = (phrase * (-(-(body - start) // len(phrase))))[: body - start]
    elif degeneration == "unclosed_think" and body:
        ids[0] = THINK_OPEN_ID
    elif think_share is not None and body:
        reasoning = max(1, round(natural * think_share))
        if finish == "stop":  # an answer that ended by itself closed its thinking first
            reasoning = min(reasoning, body - 2)
        ids[0] = THINK_OPEN_ID
        if 0 <= reasoning + 1 < body:
            ids[reasoning + 1] = THINK_CLOSE_ID
    text = decode(ids)
    cut = _first_stop(text, stop)
    if cut is not None:
        start, end, matched = cut
        return Draft(token_ids=ids[: _token_at(ids, end) + 1], text=text[:start], finish="stop", matched=matched)
    if finish == "length":
        return Draft(token_ids=ids, text=text, finish=finish, matched=None)
    return Draft(token_ids=[*ids, EOS_TOKEN_ID], text=text, finish=finish, matched=EOS_TOKEN_ID)


def _token_at(ids: Sequence[int], offset: int) -> int:
    """The index of the token whose text (with the space before it) reaches character ``offset`` of the text."""
    end = -1
    for i, token_id in enumerate(ids):
        end += len(_word(token_id)) + 1
        if end >= offset:
            return i
    return len(ids) - 1


def _first_stop(text: str, stop: Sequence[str]) -> tuple[int, int, str] | None:
    """The stop string that the generated text completes first: (its start, its end, the string)."""
    best: tuple[int, int, str] | None = None
    for s in stop:
        if not s:
            continue
        at = text.find(s)
        if at >= 0 and (best is None or at + len(s) < best[1]):
            best = (at, at + len(s), s)
    return best


def degeneration_rates(cfg: SimSpec, penalized: bool) -> list[tuple[Degeneration, float]]:
    """The simulator's share of each degenerate answer for one request (a penalty makes loops rarer)."""
    loop = cfg.loop_rate / cfg.penalty_loop_cut if penalized else cfg.loop_rate
    return [("loop", loop), ("empty", cfg.empty_rate), ("unclosed_think", cfg.unclosed_think_rate)]


def degeneration(key: int, rates: Sequence[tuple[Degeneration, float]]) -> Degeneration | None:
    """Which degenerate answer (if any) the request keyed ``key`` gets, for each kind's share of answers: a draw
    of its own, independent of the answer's length and words."""
    u = random.Random(key ^ 0x5EED_DE6E).random()
    for kind, rate in rates:
        if u < rate:
            return kind
        u -= rate
    return None


def render_chat(messages: Sequence[dict[str, object]]) -> str:
    """The prompt text of a chat, in a ChatML-like template ending with the assistant's turn."""
    parts = [f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
