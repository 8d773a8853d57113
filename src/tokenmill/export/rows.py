"""The one row a completion record exports as: read once from the record, then shaped by its format.

:func:`record_row` reads every column any format writes (the conversation, finish reason, token counts and ids,
thinking mode, sample, the kept input columns); each format of :mod:`tokenmill.export.formats` names the shape
that turns it into the row it writes: a conversation under its format's keys (JSON lines) or the table's columns
(parquet, a Hugging Face dataset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson

from tokenmill.errors import ConfigError
from tokenmill.export.conversation import conversation
from tokenmill.records import Message
from tokenmill.records.read import id_key

Row = dict[str, Any]
KeepFields = Sequence[str] | Literal["all"]
_SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt"}


def token_ids(rec: dict[str, Any]) -> dict[str, Any]:
    """The server's token ids the run captured (``save_token_ids``): one turn's prompt and completion ids, or
    ``turn_token_ids`` (a list per turn) for a multi-turn record; empty when none were captured."""
    turns = rec.get("turns")
    if turns:
        if any("completion_token_ids" in t for t in turns):
            keys = ("prompt_token_ids", "completion_token_ids")
            return {"turn_token_ids": [{k: t.get(k) for k in keys} for t in turns]}
        return {}
    if rec.get("completion_token_ids") is None:
        return {}
    return {"prompt_token_ids": rec.get("prompt_token_ids"), "completion_token_ids": rec["completion_token_ids"]}


def kept_fields(rec: dict[str, Any], keep: KeepFields) -> dict[str, Any]:
    """The record's input columns (``fields``) that ``keep`` (names, or ``"all"``) carries into the export."""
    fields = rec.get("fields") or {}
    if keep == "all":
        return dict(fields)
    return {k: fields[k] for k in keep if k in fields}


def record_row(rec: dict[str, Any], reasoning: bool, with_ids: bool, keep: KeepFields) -> Row:
    """Every column a format may write, read from the record once."""
    return {
        "id": rec["id"],
        "messages": conversation(rec, reasoning),
        "finish_reason": rec.get("finish_reason"),
        "prompt_tokens": rec.get("prompt_tokens"),
        "completion_tokens": rec.get("completion_tokens"),
        "ids": token_ids(rec) if with_ids else {},
        "thinking": rec.get("thinking"),  # the mode as sent: true, false, or null (nothing sent)
        "primary_id": rec.get("primary_id"),
        "sample": rec.get("sample"),
        "fields": kept_fields(rec, keep),
    }


# -- the shapes ------------------------------------------------------------------------------------------------


def _sharegpt(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    convo = []
    for m in messages:
        turn = {"from": _SHAREGPT_FROM[m["role"]], "value": m["content"]}
        if "reasoning_content" in m:
            turn["reasoning_content"] = m["reasoning_content"]
        convo.append(turn)
    return "conversations", convo


def _lines(row: Row, key: str, convo: Any) -> Row:
    out: Row = {"id": row["id"], key: convo}
    if row["sample"] is not None:  # samples: N — the id is {primary_id}_gen{sample}
        out["primary_id"], out["sample"] = row["primary_id"], row["sample"]
    out["thinking"] = row["thinking"]
    out.update(row["ids"])
    for name, value in row["fields"].items():
        if name in out:
            raise ConfigError(
                f"--keep-fields {name}: the exported row has a field of that name already ({', '.join(out)}); "
                "leave it out of --keep-fields"
            )
        out[name] = value
    return out


def sharegpt(row: Row) -> Row:
    """``{"id", "conversations": [{"from": "system"|"human"|"gpt", "value"}], ...}``"""
    return _lines(row, *_sharegpt(row["messages"]))


def openai_messages(row: Row) -> Row:
    """``{"id", "messages": [{"role", "content"}], ...}``"""
    return _lines(row, "messages", row["messages"])


def specforge(row: Row) -> Row:
    """``{"id", "conversations": [{"role", "content"}], ...}``"""
    return _lines(row, "conversations", row["messages"])


def table(row: Row) -> Row:
    """The table's columns (parquet, a Hugging Face dataset): every message with its ``reasoning_content`` (null
    where none), the kept input columns as one JSON object."""
    ids = row["ids"]
    primary = row["primary_id"]
    return {
        "id": id_key(row["id"]),  # a table column has one type: the id's canonical string
        "messages": [
            {"role": m["role"], "content": m["content"], "reasoning_content": m.get("reasoning_content")}
            for m in row["messages"]
        ],
        "finish_reason": row["finish_reason"],
        "prompt_tokens": row["prompt_tokens"],
        "completion_tokens": row["completion_tokens"],
        "prompt_token_ids": ids.get("prompt_token_ids"),
        "completion_token_ids": ids.get("completion_token_ids"),
        "thinking": row["thinking"],
        "primary_id": id_key(primary) if primary is not None else None,
        "sample": row["sample"],
        "fields": orjson.dumps(row["fields"]).decode() if row["fields"] else None,
    }
