"""The start probe of every job: one question asked in the job's thinking mode, to see what the model does with it.

A thinking model's reasoning comes back split off (``reasoning_content``, or vLLM's ``reasoning``: the server
runs a reasoning parser) or inline in the answer (``<think>`` … ``</think>`` in ``content``: SGLang or vLLM
started without ``--reasoning-parser``, or a completion API, which returns the text as generated). Inline
thinking left in a training corpus teaches a drafter the markers and the reasoning as the answer, so the run
stops at start with what to change, unless the job says inline thinking is intended (``thinking_inline: ok``).

The probe asks with thinking on when any prompt may think; with nothing sent when the job leaves ``thinking``
unset (a model that thinks by default, as Qwen3.x do, is caught the same way); and with thinking off when the job
says ``off``, to check that the answer holds no thinking at all: a model that thinks anyway (its chat template
ignores ``enable_thinking``) stops the run. With thinking on, an answer that shows no thinking (a model that does
not think, or too short an answer) is let through with a warning: the ``think_markers`` quality signal still marks
any record that has them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Literal

import aiohttp

from tokenmill.backends.base import BackendOptions, make_backend
from tokenmill.config import THINKING_PROBE_MAX_TOKENS, THINKING_PROBE_WAIT_S
from tokenmill.errors import ConfigError, MisconfiguredError, RequestError
from tokenmill.records import THINK_CLOSE, THINK_OPEN, Generation, Prompt

Where = Literal["separate", "inline", "unseen"]

QUESTION = "What is 17 times 23? Think it through, then answer."
THINKING_PROBE = Prompt(id="tokenmill-thinking-probe", messages=[{"role": "user", "content": QUESTION}], thinking=True)
PARSER_HINT = (
    "start the servers with a reasoning parser: SGLang --reasoning-parser qwen3 (or deepseek-r1, ...), vLLM "
    "--reasoning-parser qwen3 (or deepseek_r1, ...; vLLM before 0.10 also needs --enable-reasoning); in a fleet "
    "profile, reasoning_parser: qwen3"
)
EXCERPT_CHARS = 80
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ThinkingProbe:
    """What the probe saw: which server answered, where its reasoning was, and the start of its answer."""

    server: str
    where: Where
    excerpt: str
    completion_tokens: int | None
    asked: bool | None = True  # the thinking mode the probe was sent with (None: nothing sent)


def where_reasoning(gen: Generation) -> Where:
    """Where an answer's reasoning is: split off, inline in the text, or nowhere to be seen."""
    if gen.reasoning_content:  # a parser split it off (even a blank reasoning says the parser is on)
        return "separate"
    if THINK_OPEN in gen.text or THINK_CLOSE in gen.text:
        return "inline"
    return "unseen"


async def probe_thinking(
    kind: str,
    options: BackendOptions,
    session: aiohttp.ClientSession,
    servers: list[str],
    asked: bool | None = True,
    wait_s: float = THINKING_PROBE_WAIT_S,
) -> ThinkingProbe | None:
    """Ask the first server that answers one question in the mode ``asked`` (at most
    :data:`~tokenmill.config.THINKING_PROBE_MAX_TOKENS` tokens); None when none answered (the run's own
    requests then find out). A server that refuses the request as misconfigured is a ConfigError."""
    update = {"max_tokens": min(options.sampling.max_tokens, THINKING_PROBE_MAX_TOKENS)}
    probing = dataclasses.replace(options, save_token_ids=False, sampling=options.sampling.model_copy(update=update))
    backend = make_backend(kind, probing)
    if kind == "openai-chat" or options.tokenizer or asked is not None:
        question = dataclasses.replace(THINKING_PROBE, thinking=asked)
    else:  # a text API without a chat template: the question as plain text, nothing to switch
        question = Prompt(id=THINKING_PROBE.id, text=QUESTION)
    for server in servers:
        try:
            gen = await asyncio.wait_for(backend.generate(session, server, question), wait_s)
        except TimeoutError:
            log.warning("the thinking probe had no answer from %s within %gs; trying the next server", server, wait_s)
            continue
        except MisconfiguredError as exc:
            raise ConfigError(f"{server}: {exc.message}") from exc
        except RequestError:
            continue  # down or busy: try the next
        text = " ".join(gen.text.split())
        return ThinkingProbe(server, where_reasoning(gen), text[:EXCERPT_CHARS], gen.completion_tokens, asked)
    return None


def judge(probe: ThinkingProbe, api: str, inline_ok: bool) -> tuple[bool, str]:
    """(all well, what to log) for a probe's finding; thinking where the job does not want it (inline when not
    intended, or any with thinking off) is a ConfigError that says what to change."""
    if probe.asked is False:
        return _judge_off(probe)
    unset = probe.asked is None
    if probe.where == "separate":
        if unset:
            return True, (
                f"thinking: not set in the job (nothing sent, the model's default); {probe.server} thinks by default "
                "and returns the reasoning apart from the answer (reasoning_content); records say thinking: null. "
                "Set thinking: on or off to choose"
            )
        return True, f"thinking: {probe.server} returns the reasoning apart from the answer (reasoning_content)"
    if probe.where == "unseen":
        tokens = "?" if probe.completion_tokens is None else f"{probe.completion_tokens:,}"
        if unset:
            return True, (
                f"thinking: not set in the job (nothing sent, the model's default); the probe's answer from "
                f"{probe.server} ({tokens} tokens) shows no thinking"
            )
        return False, (
            f"thinking is on, but the probe's answer from {probe.server} ({tokens} tokens) shows no reasoning, "
            f"split off or inline ({probe.excerpt!r}): the model may not think, or its template opens the thinking "
            "block itself; `tokenmill inspect` counts the answers with think markers left in (think_markers)"
        )
    if inline_ok:
        return False, f"thinking: {probe.server} returns the reasoning inline in the answer (thinking_inline: ok)"
    raise _inline(probe, api, unset)


def _inline(probe: ThinkingProbe, api: str, unset: bool) -> ConfigError:
    """The refusal of inline thinking not intended, with what to change."""
    if api == "openai-chat":
        fix = PARSER_HINT
    else:
        fix = (
            f"api {api} returns the text as generated, so the reasoning stays in it: use api: openai-chat and "
            + PARSER_HINT
        )
    lead = (
        f"thinking is not set in the job (nothing sent, the model's default), and {probe.server} thinks by default: "
        "it returned the thinking"
        if unset
        else f"{probe.server} returned the thinking"
    )
    off = "To answer without thinking, set thinking: off in the job. " if unset else ""
    return ConfigError(
        f"{lead} inline in the answer ({THINK_OPEN}… in the content, no reasoning_content: {probe.excerpt!r}), so "
        f"every record would keep it in its answer. {off}To split it off, {fix}. If inline thinking is what you "
        "want, set thinking_inline: ok in the job"
    )


def _judge_off(probe: ThinkingProbe) -> tuple[bool, str]:
    """Thinking off: the answer must hold no thinking; a model that thinks anyway stops the run."""
    if probe.where == "unseen":
        return True, f"thinking: off; the probe's answer from {probe.server} holds no thinking"
    how = "in reasoning_content" if probe.where == "separate" else f"inline in the answer ({probe.excerpt!r})"
    raise ConfigError(
        f"thinking: off, but {probe.server} thought anyway ({how}): the model ignores "
        "chat_template_kwargs.enable_thinking: false (a thinking-only model, or a server started with a "
        "--chat-template without the switch), so every record would hold thinking the job said it does not want. "
        "Serve a model or chat template that honours enable_thinking; or, to keep the reasoning apart from the "
        f"answer, set thinking: on and {PARSER_HINT}"
    )
