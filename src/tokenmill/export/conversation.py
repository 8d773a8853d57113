"""The conversation a completion record holds: the prompt's turns with the generated answers in place.

One builder for every export: the conversation formats (one conversation with every answer), the token rows (one
conversation per generated turn, the context as it was sent) and the template round trip. An answer's
``completion`` that is null reads as empty text, everywhere.
"""

from __future__ import annotations

from typing import Any

from tokenmill.records import Message


def answers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's generated assistant turns, in order (one for a single-turn record)."""
    turns = rec.get("turns")
    return list(turns) if turns else [rec]


def assistant(answer: dict[str, Any], reasoning: bool) -> Message:
    """One generated answer as an assistant message (with its ``reasoning_content`` when ``reasoning``)."""
    msg: Message = {"role": "assistant", "content": answer.get("completion") or ""}
    if reasoning and answer.get("reasoning_content"):
        msg["reasoning_content"] = answer["reasoning_content"]
    return msg


def _given(rec: dict[str, Any]) -> list[Message]:
    prompt = rec.get("prompt")
    given = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt or [])
    return [{"role": m["role"], "content": m["content"]} for m in given]


def conversation(rec: dict[str, Any], reasoning: bool) -> list[Message]:
    """The prompt's turns with the generated assistant turn(s) in place (each with its reasoning when
    ``reasoning``)."""
    given = _given(rec)
    turns = rec.get("turns")
    if not turns:
        return [*given, assistant(rec, reasoning)]
    out: list[Message] = []
    users_seen = 0
    for msg in given:
        out.append(msg)
        if msg["role"] == "user":
            out.append(assistant(turns[users_seen], reasoning))
            users_seen += 1
    return out


def turn_conversations(rec: dict[str, Any]) -> list[list[Message]]:
    """One conversation per generated turn, ending with that turn's answer (with its reasoning): the context the
    server was sent for it (earlier answers as the run sent them, content only) plus the answer."""
    given = _given(rec)
    generated = answers(rec)
    if not rec.get("turns"):
        return [[*given, assistant(rec, True)]]
    out: list[list[Message]] = []
    history: list[Message] = []
    for msg in given:
        history.append(msg)
        if msg["role"] == "user" and len(out) < len(generated):
            answer = generated[len(out)]
            out.append([*history, assistant(answer, True)])
            history.append(assistant(answer, False))
    return out


def whole_conversation(rec: dict[str, Any]) -> list[Message]:
    """The record's conversation with every generated answer in place (each with its reasoning)."""
    last = list(turn_conversations(rec)[-1])
    generated = answers(rec)
    k = 0
    for i, msg in enumerate(last):
        if msg["role"] == "assistant" and k < len(generated):
            last[i] = assistant(generated[k], True)
            k += 1
    return last
