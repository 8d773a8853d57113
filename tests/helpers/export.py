"""Checks of exported files: a SpecForge row's shape and readers of the token rows (prompts_path and Speculators)."""

from __future__ import annotations

from numbers import Integral
from pathlib import Path
from typing import Any

import orjson


def prompts_path_reader(path: Path) -> list[dict[str, Any]]:
    """SpecForge's ``data.prompts_path`` rules: the first row must hold both fields (else it is not read as
    pre-tokenized), every row flat integer ids (no bools) and a 0/1 mask of the same non-empty length."""
    lines = [(n, orjson.loads(line)) for n, line in enumerate(path.read_bytes().splitlines(), 1) if line.strip()]
    if not lines or not {"input_ids", "loss_mask"} <= set(lines[0][1]):
        raise ValueError(f"{path}: the first record is not a pre-tokenized row")
    for n, row in lines:
        where = f"{path}:{n}"
        if "input_ids" not in row or "loss_mask" not in row:
            raise ValueError(f"{where} must contain both input_ids and loss_mask")
        ids, mask = row["input_ids"], row["loss_mask"]
        for name, seq in (("input_ids", ids), ("loss_mask", mask)):
            if not isinstance(seq, list) or any(isinstance(t, list) for t in seq):
                raise ValueError(f"{where} field {name} must be a one-dimensional list")
            if any(not isinstance(t, Integral) or isinstance(t, bool) for t in seq):
                raise ValueError(f"{where} field {name} must hold integers")
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"{where} loss_mask must be 0 or 1")
        if len(ids) != len(mask):
            raise ValueError(f"{where} has mismatched input_ids/loss_mask lengths")
        if not ids:
            raise ValueError(f"{where} contains an empty token sequence")
    return [row for _, row in lines]


def speculators_reader(path: Path) -> list[tuple[list[int], list[int]]]:
    """speculators' speculator-format pass-through: both columns in every row, one length per row, flat lists."""
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    columns = set.intersection(*(set(r) for r in rows)) if rows else set()
    if not {"input_ids", "loss_mask"} <= columns:
        raise ValueError("not speculator-format rows: input_ids and loss_mask must be columns of every row")
    out = []
    for r in rows:
        ids, mask = r["input_ids"], r["loss_mask"]
        if any(isinstance(t, list) for t in (*ids, *mask)):
            raise ValueError("nested token lists")
        if len(ids) != len(mask):
            raise ValueError(f"Speculator-format row shape mismatch: input_ids={len(ids)}, loss_mask={len(mask)}")
        out.append((ids, mask))
    return out


def specforge_valid(convo: list[dict[str, Any]]) -> bool:
    """SpecForge's conversation rules: non-empty string contents, leading system turns, then user/assistant
    strictly alternating, starting with user."""
    if not convo or any(not isinstance(m.get("content"), str) or not m["content"] for m in convo):
        return False
    i = 0
    while i < len(convo) and convo[i]["role"] == "system":
        i += 1
    rest = [m["role"] for m in convo[i:]]
    return bool(rest) and all(r == ("user" if k % 2 == 0 else "assistant") for k, r in enumerate(rest))
