"""SGLang 0.5.23's KV admission rule per request kind: what a request must find free to start, and what a
running request keeps reserved for the tokens it may still write.

The one statement of the rule for the twin's scheduler, the doctor's KV checks, the planner and autotune's
proposals (``sglang/srt/managers/schedule_policy.py``, ``PrefillAdder``):

* A new request starts when its uncached prompt, its output limit clipped at ``CLIP_MAX_NEW_TOKENS``
  (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``) and one page fit in the free (and evictable) KV, after what
  the running requests and the requests admitted before it in the same batch reserve
  (:func:`admission_need`). The whole clipped limit is charged for every kind of request.
* A running request reserves ``min(max_new - generated, clip)`` times a ratio (:func:`running_reserve`):
  SGLang's ``new_token_ratio`` (0.7 x ``--schedule-conservativeness`` at start, falling over 600 decode
  steps to 0.14 of that) for an ordinary request, which may stop early, and 1 for an ``ignore_eos`` request,
  which cannot. So ``ignore_eos`` requests are admitted only while every running one's prompt and whole
  (clipped) output fit; ordinary ones while their prompts, what they wrote and a fraction of the rest do,
  and SGLang retracts one when the pool then runs out.

:func:`concurrent_at_full_length` turns that into how many requests of one kind run at once in a pool when
every answer runs to its limit; :func:`steady_running` into how many admission keeps running in steady state
(the planner's KV bound), with the ratio settled at :func:`min_new_token_ratio` of the server's
``--schedule-conservativeness`` (:func:`schedule_conservativeness`).
"""

from __future__ import annotations

import math
from statistics import NormalDist

from tokenmill.errors import ConfigError
from tokenmill.planner.flags import EngineFlags

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
PAGE_RESERVE_TOKENS = 1  # one page per admitted request (page size 1, SGLang's default on CPU and for no_buffer)
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO (times --schedule-conservativeness, at most 1)
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
CONSERVATIVENESS_FLAG = "--schedule-conservativeness"


def clipped_output(max_new_tokens: int, generated: int = 0, clip: int = CLIP_MAX_NEW_TOKENS) -> int:
    """The output tokens SGLang's estimate still counts for a request: ``min(max_new - generated, clip)``."""
    return min(max(max_new_tokens - generated, 0), clip)


def reserve_ratio(new_token_ratio: float, ignore_eos: bool) -> float:
    """The share of its remaining output a running request reserves: 1 with ``ignore_eos``, else the ratio."""
    return 1.0 if ignore_eos else new_token_ratio


def running_reserve(
    max_new_tokens: int,
    generated: int,
    *,
    ignore_eos: bool,
    new_token_ratio: float,
    clip: int = CLIP_MAX_NEW_TOKENS,
) -> float:
    """KV tokens admission keeps free for one running request's future output."""
    return clipped_output(max_new_tokens, generated, clip) * reserve_ratio(new_token_ratio, ignore_eos)


def admission_need(
    prompt_tokens: int,
    max_new_tokens: int,
    *,
    cached_tokens: int = 0,
    generated: int = 0,
    clip: int = CLIP_MAX_NEW_TOKENS,
) -> int:
    """KV tokens a new (or retracted) request is charged at admission: the prompt (and the tokens it wrote
    before a retraction) not served by the prefix cache, its clipped remaining output and one page. SGLang
    admits it when this is below the KV left after the running requests' reserves."""
    fill = prompt_tokens + generated - cached_tokens
    return max(fill, 0) + clipped_output(max_new_tokens, generated, clip) + PAGE_RESERVE_TOKENS


def min_new_token_ratio(conservativeness: float = 1.0) -> float:
    """Where the new-token ratio settles after ``NEW_TOKEN_RATIO_DECAY_STEPS`` decode steps."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    return min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)


def concurrent_at_full_length(
    kv_tokens: int,
    prompt_tokens: float,
    max_new_tokens: int,
    *,
    ignore_eos: bool,
    conservativeness: float = 1.0,
    clip: int = CLIP_MAX_NEW_TOKENS,
) -> int:
    """Requests of one kind that can run at once in ``kv_tokens`` when every answer runs to ``max_new_tokens``.

    ``ignore_eos``: admission itself binds: each running request holds or reserves its prompt and whole
    clipped output, and one more needs that much plus a page. Ordinary requests are admitted against a small
    reserve, so admission lets in more than the pool holds at full length; SGLang then retracts until the
    running set fits, so the answer is what the pool holds: prompt plus the whole output per request (the
    clip does not apply to tokens actually written)."""
    if kv_tokens <= 0:
        return 0
    if ignore_eos:
        per = prompt_tokens + clipped_output(max_new_tokens, 0, clip) + PAGE_RESERVE_TOKENS
    else:
        per = prompt_tokens + max_new_tokens
    return max(1, math.floor(kv_tokens / max(per, 1.0)))


def admits(need: float, held: float, kv_tokens: float) -> bool:
    """Whether a request charged ``need`` starts beside running requests that hold and reserve ``held`` tokens of
    a ``kv_tokens`` pool: SGLang's ``PrefillAdder`` refuses it when the need reaches what is left."""
    return need < kv_tokens - held


def answer_lengths(output_tokens: float, max_new_tokens: int, sigma: float, points: int = 200) -> list[float]:
    """Answer lengths of mean ``output_tokens`` under a limit of ``max_new_tokens``, as equal-probability points:
    log-normal with ``sigma``, cut at the limit, the log-normal's mean chosen so that the cut lengths average
    ``output_tokens`` (sigma 0: every answer that long)."""
    if sigma <= 0 or output_tokens >= max_new_tokens:
        return [min(float(output_tokens), float(max_new_tokens))]
    z = [NormalDist().inv_cdf((i + 0.5) / points) for i in range(points)]

    def cut(mu: float) -> list[float]:
        return [min(math.exp(mu + sigma * x), float(max_new_tokens)) for x in z]

    low, high = math.log(output_tokens) - 4 * sigma - 5, math.log(max_new_tokens) + 4 * sigma + 5
    for _ in range(60):  # the cut mean rises with mu: bisect
        mid = (low + high) / 2
        if sum(cut(mid)) / points < output_tokens:
            low = mid
        else:
            high = mid
    return cut((low + high) / 2)


def _clipped_integral(length: float, max_new_tokens: int, clip: int) -> float:
    """The integral of ``min(max_new - w, clip)`` over the tokens written, ``w`` from 0 to ``length``."""
    turn = max_new_tokens - clip  # below it the clip binds
    flat = min(length, max(turn, 0.0))
    rest_from, rest_to = max(turn, 0.0), max(length, max(turn, 0.0))
    tail = max_new_tokens * (rest_to - rest_from) - (rest_to**2 - rest_from**2) / 2
    return clip * flat + tail


def held_per_request(
    prompt_tokens: float,
    output_tokens: float,
    max_new_tokens: int,
    *,
    ignore_eos: bool,
    new_token_ratio: float,
    clip: int = CLIP_MAX_NEW_TOKENS,
    sigma: float = 0.0,
) -> float:
    """KV tokens one running request counts against admission, on average over the running set in steady state:
    what it holds (its prompt and what it has written) plus what it reserves of the rest (:func:`running_reserve`:
    all of the clipped rest for ``ignore_eos``, the ratio of it otherwise).

    The running set is an average over time, so a request counts for as long as it runs: with answer lengths
    spread (log-normal ``sigma``, :func:`answer_lengths`) long answers are over-represented, and a running request
    has written ``E[L^2] / (2 E[L])`` on average, not half the mean (sigma 0.6: 1.4 times that); what it reserves is
    averaged the same way."""
    lengths = answer_lengths(output_tokens, max_new_tokens, 0.0 if ignore_eos else sigma)
    total = sum(lengths)
    written = sum(x * x for x in lengths) / (2 * total) if total else 0.0
    reserved = sum(_clipped_integral(x, max_new_tokens, clip) for x in lengths) / total if total else float(clip)
    return prompt_tokens + written + reserved * reserve_ratio(new_token_ratio, ignore_eos)


def held_context(prompt_tokens: float, output_tokens: float, max_new_tokens: int, sigma: float = 0.0) -> float:
    """Tokens a running request holds on average in steady state (:func:`held_per_request` without the reserve)."""
    lengths = answer_lengths(output_tokens, max_new_tokens, sigma)
    total = sum(lengths)
    return prompt_tokens + (sum(x * x for x in lengths) / (2 * total) if total else 0.0)


def steady_running(
    kv_tokens: int,
    prompt_tokens: float,
    output_tokens: float,
    max_new_tokens: int,
    *,
    ignore_eos: bool,
    conservativeness: float = 1.0,
    clip: int = CLIP_MAX_NEW_TOKENS,
    sigma: float = 0.0,
) -> int:
    """Requests of one kind admission keeps running at once in ``kv_tokens``, in steady state (requests at every
    stage of their lives, leaving one at a time): the most N such that N - 1 running requests, each counting
    :func:`held_per_request`, leave room for one more's :func:`admission_need`. ``ignore_eos`` answers run to
    ``max_new_tokens`` and reserve all of what is left (with a limit within the clip each counts its prompt and
    whole limit); ordinary ones write ``output_tokens`` on average (log-normal ``sigma`` about it, cut at the limit)
    and reserve the settled new-token ratio of the rest. 0 when the pool cannot hold one request."""
    out = float(max_new_tokens) if ignore_eos else min(output_tokens, max_new_tokens)
    ratio = min_new_token_ratio(conservativeness)
    per = held_per_request(
        prompt_tokens, out, max_new_tokens, ignore_eos=ignore_eos, new_token_ratio=ratio, clip=clip, sigma=sigma
    )
    need = admission_need(round(prompt_tokens), max_new_tokens, clip=clip)
    if kv_tokens < prompt_tokens + out / 2:
        return 0
    if not admits(need, 0.0, kv_tokens):
        return 1  # an idle server takes its first request regardless
    running = max(1, math.ceil((kv_tokens - need) / max(per, 1.0)))
    while running > 1 and not admits(need, (running - 1) * per, kv_tokens):
        running -= 1  # float error at an exact multiple
    return running


def schedule_conservativeness(flags: EngineFlags) -> tuple[float, tuple[str, ...]]:
    """``--schedule-conservativeness`` from the flags the planner leaves unmodeled (1 when not given), and the rest
    of them. It scales the new-token ratio (:func:`min_new_token_ratio`)."""
    value, rest = 1.0, []
    for item in flags.ignored:
        name, _, raw = item.partition(" ")
        if name != CONSERVATIVENESS_FLAG:
            rest.append(item)
            continue
        try:
            value = float(raw)
        except ValueError as exc:
            raise ConfigError(f"{CONSERVATIVENESS_FLAG} takes a number, got {raw!r}") from exc
        if value <= 0:
            raise ConfigError(f"{CONSERVATIVENESS_FLAG} must be positive, got {value}")
    return value, tuple(rest)
