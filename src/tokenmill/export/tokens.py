"""Token rows for drafter training (``export --format tokens``) and the chat template round-trip check.

A row is ``{"id", "input_ids", "loss_mask", "token_source", "finish_reason"}``: flat integer lists of one length,
the mask 0 on the prompt, the chat headers and the user turns and 1 on every regenerated assistant turn's tokens,
its end-of-turn token included — the pre-tokenized rows SpecForge (``data.prompts_path``) and vLLM speculators
read. The ids are the server's own when the run captured them (``save_token_ids``; ``token_source: "server"``),
else the conversation rendered through the model's chat template and tokenised (``"template"``). ``per_turn``
writes one row per assistant turn (``{id}_turn{k}``, with ``primary_id`` and ``turn``): the turn's context as
it was sent, earlier answers without their reasoning, only that turn supervised. ``max_length`` cuts rows; a
row left with no supervised token is left out with its reason, never dropped unsaid.

The round-trip check renders each record with server ids (prompt + answer, per turn) through the tokenizer's chat
template and compares the ids with the server's: where they differ, a trainer that re-renders the text would see
other tokens than the model produced.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import le
from pathlib import Path
from typing import Any

from tokenmill.backends.templating import ChatTemplater
from tokenmill.errors import ConfigError, PermanentError
from tokenmill.output.identity import read_record
from tokenmill.records import Message
from tokenmill.storage.corpus import Corpus, open_corpus

EXCERPT_TOKENS = 8  # tokens shown on each side of a first difference
EXAMPLES = 5  # differing records shown by the round-trip check


# -- the conversation a record holds ----------------------------------------------------------------------------


def _answers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's generated assistant turns, in order (one for a single-turn record)."""
    turns = rec.get("turns")
    return list(turns) if turns else [rec]


def _assistant(answer: dict[str, Any], reasoning: bool) -> Message:
    msg: Message = {"role": "assistant", "content": answer.get("completion") or ""}
    if reasoning and answer.get("reasoning_content"):
        msg["reasoning_content"] = answer["reasoning_content"]
    return msg


def turn_conversations(rec: dict[str, Any]) -> list[list[Message]]:
    """One conversation per generated turn, ending with that turn's answer (with its reasoning): the context the
    server was sent for it (earlier answers as the run sent them, content only) plus the answer."""
    prompt = rec.get("prompt")
    given: list[Message] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt or [])
    answers = _answers(rec)
    if not rec.get("turns"):
        return [[*({"role": m["role"], "content": m["content"]} for m in given), _assistant(rec, True)]]
    out: list[list[Message]] = []
    history: list[Message] = []
    for msg in given:
        history.append({"role": msg["role"], "content": msg["content"]})
        if msg["role"] == "user" and len(out) < len(answers):
            answer = answers[len(out)]
            out.append([*history, _assistant(answer, True)])
            history.append(_assistant(answer, False))
    return out


def whole_conversation(rec: dict[str, Any]) -> list[Message]:
    """The record's conversation with every generated answer in place (each with its reasoning)."""
    convos = turn_conversations(rec)
    last = list(convos[-1])
    answers = _answers(rec)
    k = 0
    for i, msg in enumerate(last):
        if msg["role"] == "assistant" and k < len(answers):
            last[i] = _assistant(answers[k], True)
            k += 1
    return last


# -- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenOptions:
    """How token rows are built."""

    tokenizer: str | None = None  # a local tokenizer directory (default: the job's `tokenizer`)
    per_turn: bool = False
    max_length: int | None = None


@dataclass(slots=True)
class TokenCounts:
    """Where the rows' ids came from and what ``max_length`` cut (written into the export's counts)."""

    rows: int = 0
    from_server: int = 0
    from_template: int = 0
    rows_cut: int = 0
    tokens_cut: int = 0
    supervised_cut: int = 0
    supervised: int = 0
    tokens: int = 0
    end_of_turn_added: int = 0
    turns_left_out: Counter[str] = field(default_factory=Counter)  # per-turn rows left out, by reason
    notes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "tokens": self.tokens,
            "supervised_tokens": self.supervised,
            "from_server_ids": self.from_server,
            "from_chat_template": self.from_template,
            "end_of_turn_added": self.end_of_turn_added,
            "rows_cut": self.rows_cut,
            "tokens_cut": self.tokens_cut,
            "supervised_tokens_cut": self.supervised_cut,
            "turn_rows_left_out": dict(sorted(self.turns_left_out.items())),
            "notes": dict(sorted(self.notes.items())),
        }

    def render(self) -> str:
        lines = [
            f"token rows {self.rows:,}: {self.tokens:,} tokens, {self.supervised:,} supervised; ids from the "
            f"server {self.from_server:,}, from the chat template {self.from_template:,}"
        ]
        if self.end_of_turn_added:
            lines.append(
                f"  end-of-turn token added after {self.end_of_turn_added:,} answers the server stopped without it"
            )
        if self.rows_cut:
            lines.append(
                f"  cut at --max-length: {self.rows_cut:,} rows, {self.tokens_cut:,} tokens "
                f"({self.supervised_cut:,} of them supervised)"
            )
        lines += [f"  turn rows left out {n:,}: {reason}" for reason, n in sorted(self.turns_left_out.items())]
        lines += [f"  {n:,} records: {note}" for note, n in sorted(self.notes.items())]
        return "\n".join(lines)


class LeftOut(Exception):
    """A record that yields no token row, with the reason the export's counts show."""


TEXT_APIS = ("openai-completions", "sglang-generate")  # a plain-text prompt is sent as it is, no chat template


def job_setting(target: str | Path, key: str) -> str | None:
    """A string setting (`tokenizer`, `api`) of the job an output directory records (None for a prefix, or a
    job without it)."""
    text = str(target)
    if "://" in text or not Path(text).is_dir():
        return None
    record = read_record(Path(text))
    return record.setting(key) if record is not None else None


def _plain_text(rec: dict[str, Any], api: str | None) -> bool:
    """Whether the record's prompt went to the server as plain text (no chat template)."""
    return isinstance(rec.get("prompt"), str) and api in TEXT_APIS


class TokenRows:
    """Builds the token rows of records; the tokenizer is loaded on first need (server ids need none unless an
    end-of-turn token must be added or a record has no ids)."""

    def __init__(self, opts: TokenOptions, job_tokenizer: str | None = None, api: str | None = None) -> None:
        self.opts = opts
        self.tokenizer = opts.tokenizer or job_tokenizer
        self.api = api
        self.counts = TokenCounts()
        self._templater: ChatTemplater | None = None

    def templater(self, why: str) -> ChatTemplater:
        if self._templater is None:
            if not self.tokenizer:
                raise ConfigError(
                    f"the tokens export needs the model's tokenizer {why}: pass --tokenizer DIR (the model's "
                    "directory with tokenizer.json and its chat template), or set `tokenizer:` in the job"
                )
            self._templater = ChatTemplater(self.tokenizer)
        return self._templater

    def rows(self, rec: dict[str, Any]) -> list[dict[str, Any]]:
        """The token rows of one record (one, or one per turn); :class:`LeftOut` when none is left."""
        rid = str(rec["id"])
        answers = _answers(rec)
        has_ids = all(a.get("completion_token_ids") and a.get("prompt_token_ids") for a in answers)
        built: list[tuple[list[int], list[int], str, int | None]] = []  # ids, mask, source, turn
        if self.opts.per_turn:
            convos = turn_conversations(rec) if not has_ids else [[] for _ in answers]
            for k, answer in enumerate(answers):
                if has_ids:
                    ids, mask = self._server_turn(answer)
                    built.append((ids, mask, "server", k))
                else:
                    ids, mask = self._rendered(convos[k], last_only=True)
                    built.append((ids, mask, "template", k))
        elif has_ids:
            joined = self._server_joined(answers) or self._server_last(rec, answers)
            if joined is not None:
                built.append((*joined, "server", None))
            else:
                self.counts.notes["multi-turn server ids do not extend one another: rendered instead"] += 1
                why = "for multi-turn records whose turns' ids do not extend one another (or use --per-turn)"
                built.append((*self._rendered(whole_conversation(rec), last_only=False, why=why), "template", None))
        elif _plain_text(rec, self.api):
            built.append((*self._plain(rec), "template", None))
        else:
            built.append((*self._rendered(whole_conversation(rec), last_only=False), "template", None))
        out: list[dict[str, Any]] = []
        reasons: list[str] = []
        for ids, mask, source, turn in built:
            reason = self._cut(ids, mask)
            if reason is not None:
                reasons.append(reason)
                if self.opts.per_turn and len(built) > 1:
                    self.counts.turns_left_out[reason] += 1
                continue
            row: dict[str, Any] = {"id": rid if turn is None else f"{rid}_turn{turn}"}
            if turn is not None:
                row["primary_id"] = rid
                row["turn"] = turn
            row["input_ids"] = ids
            row["loss_mask"] = mask
            row["token_source"] = source
            row["finish_reason"] = (answers[turn] if turn is not None else answers[-1]).get("finish_reason")
            row["thinking"] = rec.get("thinking")  # the thinking mode as sent (null: none)
            self.counts.rows += 1
            self.counts.tokens += len(ids)
            self.counts.supervised += sum(mask)
            self.counts.from_server += source == "server"
            self.counts.from_template += source == "template"
            out.append(row)
        if not out:
            raise LeftOut(reasons[0] if reasons else "no assistant turn to supervise")
        return out

    # -- from the server's ids --

    def _completion(self, answer: dict[str, Any]) -> list[int]:
        """The answer's ids, ending with the end-of-turn token when the answer stopped (a server that leaves the
        stop token out of its ids gets it added, so the drafter learns where a turn ends, as trainers mask it)."""
        ids = [int(t) for t in answer["completion_token_ids"]]
        if answer.get("finish_reason") != "stop" or not self.tokenizer:
            return ids
        templater = self.templater("to add the end-of-turn token")
        eot = templater.eos_token
        eot_id = templater.token_id(eot) if eot else None
        if eot_id is not None and (not ids or ids[-1] != eot_id):
            ids.append(eot_id)
            self.counts.end_of_turn_added += 1
        return ids

    def _server_turn(self, answer: dict[str, Any]) -> tuple[list[int], list[int]]:
        prompt = [int(t) for t in answer["prompt_token_ids"]]
        completion = self._completion(answer)
        return prompt + completion, [0] * len(prompt) + [1] * len(completion)

    def _server_joined(self, answers: list[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
        """Every turn in one row when each turn's prompt ids extend the ids before it; else None."""
        ids: list[int] = []
        mask: list[int] = []
        for answer in answers:
            prompt = [int(t) for t in answer["prompt_token_ids"]]
            if prompt[: len(ids)] != ids:
                return None
            new = prompt[len(ids) :]
            completion = self._completion(answer)
            ids += new + completion
            mask += [0] * len(new) + [1] * len(completion)
        return ids, mask

    def _server_last(self, rec: dict[str, Any], answers: list[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
        """Every turn in one row from the last turn's ids (its prompt holds the earlier answers as the server
        tokenised them from their text), the earlier answers located by the chat template: when the template
        renders that prompt to the server's very ids; else None."""
        if not self.tokenizer:
            return None
        templater = self.templater("to find earlier answers in a multi-turn prompt")
        history = turn_conversations(rec)[-1][:-1]
        try:
            ids, mask = prompt_masked(templater, history)
        except PermanentError:
            return None
        last = answers[-1]
        if ids != [int(t) for t in last["prompt_token_ids"]]:
            return None
        completion = self._completion(last)
        return ids + completion, mask + [1] * len(completion)

    # -- through the chat template --

    def _rendered(
        self, messages: list[Message], *, last_only: bool, why: str = "to render records that carry no server token ids"
    ) -> tuple[list[int], list[int]]:
        templater = self.templater(why)
        try:
            return render_masked(templater, messages, last_only=last_only)
        except PermanentError as exc:
            raise LeftOut(f"the chat template cannot render it ({exc})") from exc

    def _plain(self, rec: dict[str, Any]) -> tuple[list[int], list[int]]:
        templater = self.templater("to tokenise records that carry no server token ids")
        prompt = templater.encode(str(rec["prompt"]))
        answer = templater.encode(rec.get("completion") or "")
        return prompt + answer, [0] * len(prompt) + [1] * len(answer)

    def _cut(self, ids: list[int], mask: list[int]) -> str | None:
        limit = self.opts.max_length
        if limit is not None and len(ids) > limit:
            self.counts.rows_cut += 1
            self.counts.tokens_cut += len(ids) - limit
            self.counts.supervised_cut += sum(mask[limit:])
            del ids[limit:], mask[limit:]
            if not any(mask):
                return f"no supervised token within --max-length {limit}"
        if not ids:
            return "no token ids"
        if not any(mask):
            return "no supervised token"
        return None


def render_masked(templater: ChatTemplater, messages: list[Message], *, last_only: bool) -> tuple[list[int], list[int]]:
    """``messages`` rendered by the chat template and tokenised, the mask 1 on the assistant turns (only the last
    one with ``last_only``, earlier answers then rendered without their reasoning), each turn's end-of-turn token
    included."""
    if last_only:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        messages = [
            {"role": m["role"], "content": m["content"]} if m["role"] == "assistant" and i != last else m
            for i, m in enumerate(messages)
        ]
    text = templater.render_full(messages)
    spans = _spans(templater, messages, text)
    if last_only:
        spans = spans[-1:]
    return _masked(templater, text, spans)


def prompt_masked(templater: ChatTemplater, messages: list[Message]) -> tuple[list[int], list[int]]:
    """A prompt (``messages`` ending with a user turn) rendered with the assistant prefix and tokenised, the mask
    1 on the assistant turns it holds (each with its end-of-turn token)."""
    text = templater.render_full(messages, generation_prompt=True)
    return _masked(templater, text, _spans(templater, messages, text))


def _spans(templater: ChatTemplater, messages: list[Message], text: str) -> list[tuple[int, int]]:
    spans = []
    cursor = 0
    specials = templater.special_tokens
    for i, msg in enumerate(messages):
        if msg["role"] == "assistant":
            spans.append(_assistant_span(templater, messages, i, text, cursor, specials))
            cursor = spans[-1][1]
    return spans


def _masked(templater: ChatTemplater, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    ids, offsets = templater.encode_offsets(text)
    return ids, span_mask(offsets, spans)


def span_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """1 for each token whose characters overlap one of ``spans``. A fast tokenizer's offsets never go back, so
    each span's tokens are one run found by bisection (two searches per span, not a test per token and span)."""
    starts = [s for s, _ in offsets]
    ends = [e for _, e in offsets]
    if not (all(map(le, starts, starts[1:])) and all(map(le, ends, ends[1:]))):
        return [1 if any(s < end and e > start for start, end in spans) else 0 for s, e in offsets]
    mask = [0] * len(offsets)
    for start, end in spans:
        first = bisect_right(ends, start)  # the first token that ends after the span starts
        stop = bisect_left(starts, end)  # past the last token that starts before the span ends
        if stop > first:
            mask[first:stop] = [1] * (stop - first)
    return mask


def _assistant_span(
    templater: ChatTemplater, messages: list[Message], i: int, text: str, cursor: int, specials: list[str]
) -> tuple[int, int]:
    """The characters of assistant turn ``i`` in ``text``: from the end of its header (the template's generation
    prompt) to the end of its content plus the end-of-turn token that follows."""
    msg = messages[i]
    head = templater.render_full(messages[:i], generation_prompt=True) if i else ""
    if i and text.startswith(head) and len(head) >= cursor:
        start = len(head)
    else:  # the template renders history otherwise than its generation prompt: find the turn's own text
        first = msg.get("reasoning_content") or msg["content"]
        found = text.find(first, cursor) if first else -1
        start = found if found >= 0 else cursor
    content = msg["content"]
    at = text.find(content, start) if content else start
    if at < 0:
        raise PermanentError("the chat template leaves an assistant turn's text out of the rendered conversation")
    end = at + len(content)
    for token in specials:
        if text.startswith(token, end):
            end += len(token)
            break
    return start, end


# -- the round-trip check ------------------------------------------------------------------------------------------


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
        }

    def render(self) -> str:
        lines = [f"template round trip ({self.tokenizer}) over {self.source}"]
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
) -> RoundTrip:
    """The round-trip check over ``records`` (every turn with server ids); ``api`` is the job's (a plain-text
    prompt sent to a text-completion API is compared without a chat template)."""
    result = RoundTrip(source=source, tokenizer=str(templater.path))
    for rec in records:
        result.records += 1
        answers = _answers(rec)
        if not all(a.get("completion_token_ids") and a.get("prompt_token_ids") for a in answers):
            result.without_ids += 1
            continue
        multi = bool(rec.get("turns"))
        convos: list[list[Message] | str] = (
            [str(rec["prompt"])] if _plain_text(rec, api) and not multi else list(turn_conversations(rec))
        )
        for k, (messages, answer) in enumerate(zip(convos, answers, strict=False)):
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
    return result


def check_corpus(target: str | Path, tokenizer: str | None = None, examples: int = EXAMPLES) -> RoundTrip:
    """The round-trip check over the live records of ``target`` (an output directory or a prefix), with
    ``tokenizer`` or else the job's."""
    path = tokenizer or job_setting(target, "tokenizer")
    if not path:
        raise ConfigError(
            f"the round-trip check needs the model's tokenizer: pass --tokenizer DIR ({target} records none)"
        )
    templater = ChatTemplater(path)
    corpus: Corpus = open_corpus(target)
    return round_trip(corpus.iter_live(), templater, corpus.shown, examples, job_setting(target, "api"))
