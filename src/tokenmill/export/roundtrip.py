"""The chat template round trip (``inspect --tokens``): each record with server ids (prompt + answer, per turn)
rendered through the tokenizer's chat template, its ids compared with the server's. Where they differ, a trainer
that re-renders the text would see other tokens than the model produced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenmill.backends.templating import ChatTemplater
from tokenmill.config import ExportSpec
from tokenmill.errors import ConfigError, PermanentError
from tokenmill.export.conversation import answers, turn_conversations
from tokenmill.export.tokens import LeftOut, TokenOptions, TokenRows, job_setting, plain_text
from tokenmill.export.usage import UsageCheck
from tokenmill.records import Message
from tokenmill.storage.corpus import Corpus, open_corpus

EXCERPT_TOKENS = 8  # tokens shown on each side of a first difference
EXAMPLES = 5  # differing records shown by the round-trip check


@dataclass(frozen=True, slots=True)
class Difference:
    """Where one turn's template ids first leave the server's."""

    id: str
    turn: int | None
    position: int
    where: str  # "prompt" | "completion" | "end" (one side is the other plus a tail) | "cut" (an answer cut at
    # max_tokens, which the template closes)
    server_len: int
    template_len: int
    server: str  # decoded excerpt around the position
    template: str
    same_text: bool  # both decode to the same text: the server's tokens are another split of it

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "turn": self.turn,
            "position": self.position,
            "where": self.where,
            "server_tokens": self.server_len,
            "template_tokens": self.template_len,
            "server": self.server,
            "template": self.template,
            "same_text": self.same_text,
        }


@dataclass(slots=True)
class RoundTrip:
    """What the round-trip check found over a corpus."""

    source: str
    tokenizer: str
    records: int = 0  # live records read
    checked: int = 0  # turns with server ids compared
    without_ids: int = 0  # records without server ids (not checked)
    unrenderable: int = 0  # turns the template could not render
    differ: int = 0
    same_text: int = 0  # differing answers whose ids decode to the very text the template's do
    where: Counter[str] = field(default_factory=Counter)  # "prompt" / "completion" / "end" / "cut"
    positions: Counter[str] = field(default_factory=Counter)  # "<where> at <offset from that part's start>"
    examples: list[Difference] = field(default_factory=list)
    usage: UsageCheck | None = None  # every record's rendered counts against the servers' usage counts

    @property
    def share(self) -> float:
        return self.differ / self.checked if self.checked else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "records": self.records,
            "checked_turns": self.checked,
            "without_server_ids": self.without_ids,
            "unrenderable": self.unrenderable,
            "differ": self.differ,
            "differ_share": round(self.share, 4),
            "same_text": self.same_text,
            "where": dict(sorted(self.where.items())),
            "positions": dict(self.positions.most_common(10)),
            "examples": [d.as_dict() for d in self.examples],
            **({"usage": self.usage.as_dict()} if self.usage is not None else {}),
        }

    def render(self) -> str:
        lines = [f"template round trip ({self.tokenizer}) over {self.source}"]
        if self.usage is not None and self.usage.compared:
            lines.append(self.usage.render())
        if not self.checked:
            lines.append(
                f"  no record carries server token ids ({self.without_ids:,} records without): run the job "
                "with save_token_ids: true to check"
            )
            return "\n".join(lines)
        lines.append(
            f"  {self.differ:,} of {self.checked:,} answers ({self.share:.1%}) render to other ids than the server "
            "produced"
        )
        names = {
            "prompt": "in the prompt",
            "completion": "in the answer",
            "end": "only at the end (one side has extra tokens)",
            "cut": "only at the end of an answer cut at max_tokens (the template closes a turn the model never ended)",
        }
        lines += [f"    {names.get(w, w)}: {n:,}" for w, n in sorted(self.where.items())]
        if self.same_text:
            lines.append(
                f"    {self.same_text:,} of them the same text split into other tokens (the model sampled a split "
                "the tokenizer would not make; a trainer that re-tokenizes the text sees other ids)"
            )
        if self.positions:
            common = ", ".join(f"{pos} ({n:,})" for pos, n in self.positions.most_common(3))
            lines.append(f"    most common first difference: {common}")
        if self.without_ids:
            lines.append(f"  {self.without_ids:,} records without server token ids were not checked")
        if self.unrenderable:
            lines.append(f"  {self.unrenderable:,} answers the chat template cannot render")
        for d in self.examples:
            turn = "" if d.turn is None else f" turn {d.turn}"
            same = ", same text" if d.same_text else ""
            lines.append(f"  {d.id}{turn}: first difference at token {d.position:,} ({d.where}{same})")
            lines.append(f"    server:   {d.server!r}")
            lines.append(f"    template: {d.template!r}")
        return "\n".join(lines)


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(
    templater: ChatTemplater,
    rid: str,
    turn: int | None,
    messages: list[Message] | str,
    answer: dict[str, Any],
) -> Difference | None:
    """The first difference between the server's ids of one answer and the chat template's rendering of the same
    conversation (None when they agree, a trailing newline the template adds after the end-of-turn aside). A
    plain-text ``messages`` (a prompt sent as text) is tokenised with the answer appended, no template."""
    prompt = [int(t) for t in answer["prompt_token_ids"]]
    server = prompt + [int(t) for t in answer["completion_token_ids"]]
    if isinstance(messages, str):
        template = templater.encode(messages + (answer.get("completion") or ""))
    else:
        template = templater.encode(templater.render_full(messages))
    pos = _first_difference(server, template)
    if pos is None:
        return None
    if pos == len(server) and not templater.decode(template[pos:]).strip():
        return None  # only whitespace after the server's last token: not a token the model is trained on
    inside = "prompt" if pos < len(prompt) else "completion"
    where = "end" if pos >= min(len(server), len(template)) else inside
    if where == "end" and pos == len(server) and answer.get("finish_reason") == "length":
        where = "cut"  # the server stopped at max_tokens; the template closes the turn it never ended
    lo = max(0, pos - EXCERPT_TOKENS)
    return Difference(
        id=rid,
        turn=turn,
        position=pos,
        where=where,
        server_len=len(server),
        template_len=len(template),
        server=templater.decode(server[lo : pos + EXCERPT_TOKENS]),
        template=templater.decode(template[lo : pos + EXCERPT_TOKENS]),
        same_text=where in ("prompt", "completion") and _text(templater, server) == _text(templater, template),
    )


def _text(templater: ChatTemplater, ids: list[int]) -> str:
    """The decoded text without the closing end-of-turn token and whitespace."""
    text = templater.decode(ids).rstrip()
    eos = templater.eos_token
    return text.removesuffix(eos).rstrip() if eos else text


def _offset(d: Difference, prompt_len: int) -> str:
    if d.where == "prompt":
        return f"prompt token {d.position}"
    if d.where == "completion":
        return f"answer token {d.position - prompt_len}"
    return f"end (server {d.server_len - prompt_len}, template {d.template_len - prompt_len} answer tokens)"


def round_trip(
    records: Iterable[dict[str, Any]],
    templater: ChatTemplater,
    source: str,
    examples: int = EXAMPLES,
    api: str | None = None,
    max_disagree: float | None = None,
) -> RoundTrip:
    """The round-trip check over ``records`` (every turn with server ids); ``api`` is the job's (a plain-text
    prompt sent to a text-completion API is compared without a chat template). With ``max_disagree``, every
    record's rendered counts are compared with the servers' usage counts too (:mod:`tokenmill.export.usage`)."""
    result = RoundTrip(source=source, tokenizer=str(templater.path))
    usage = None
    if max_disagree is not None:
        usage = TokenRows(TokenOptions(str(templater.path), max_disagree=max_disagree), api=api, templater=templater)
        result.usage = usage.counts.usage
    for rec in records:
        result.records += 1
        if usage is not None:
            with suppress(LeftOut):  # a record the template cannot render: the round trip counts it
                usage.check_usage(rec)
        _compare_record(result, templater, rec, api, examples)
    return result


def _compare_record(
    result: RoundTrip, templater: ChatTemplater, rec: dict[str, Any], api: str | None, examples: int
) -> None:
    generated = answers(rec)
    if not all(a.get("completion_token_ids") and a.get("prompt_token_ids") for a in generated):
        result.without_ids += 1
        return
    multi = bool(rec.get("turns"))
    convos: list[list[Message] | str] = (
        [str(rec["prompt"])] if plain_text(rec, api) and not multi else list(turn_conversations(rec))
    )
    for k, (messages, answer) in enumerate(zip(convos, generated, strict=False)):
        result.checked += 1
        try:
            diff = compare(templater, str(rec["id"]), k if multi else None, messages, answer)
        except PermanentError:
            result.unrenderable += 1
            continue
        if diff is None:
            continue
        result.differ += 1
        result.same_text += diff.same_text
        result.where[diff.where] += 1
        result.positions[_offset(diff, len(answer["prompt_token_ids"]))] += 1
        if len(result.examples) < examples:
            result.examples.append(diff)


def check_corpus(
    target: str | Path,
    tokenizer: str | None = None,
    examples: int = EXAMPLES,
    max_disagree: float = ExportSpec().usage_max_disagree,
) -> RoundTrip:
    """The round-trip check over the live records of ``target`` (an output directory or a prefix), with
    ``tokenizer`` or else the job's, and every record's rendered counts against the servers' usage counts."""
    path = tokenizer or job_setting(target, "tokenizer")
    if not path:
        raise ConfigError(
            f"the round-trip check needs the model's tokenizer: pass --tokenizer DIR ({target} records none)"
        )
    templater = ChatTemplater(path)
    corpus: Corpus = open_corpus(target)
    return round_trip(
        (r.read_json() for r in corpus.iter_live()),
        templater,
        corpus.shown,
        examples,
        job_setting(target, "api"),
        max_disagree,
    )
