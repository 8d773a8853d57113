"""The model catalog: bundled config.json files (``configs/*.json``) and configs on disk.

A bundled file is a Hugging Face ``config.json`` written from the reference's numbers, plus a
``_tokenmill`` block with its friendly name, aliases, sources and the fields that had to be assumed.
:func:`load_model` accepts a bundled name or alias (case- and punctuation-insensitive), a path to a
``config.json``, or a directory holding one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from tokenmill.errors import ConfigError
from tokenmill.planner.hardware import normalize_name
from tokenmill.planner.hfconfig import from_hf_config
from tokenmill.planner.models import ModelSpec

_META_KEY = "_tokenmill"


def _spec_from_mapping(cfg: Mapping[str, Any], fallback_name: str) -> ModelSpec:
    meta = cfg.get(_META_KEY)
    meta = meta if isinstance(meta, Mapping) else {}
    return from_hf_config(
        cfg,
        str(meta.get("name") or fallback_name),
        aliases=tuple(meta.get("aliases") or ()),
        sources=tuple(meta.get("sources") or ()),
        assumed=tuple(meta.get("assumed") or ()),
    )


def _parse_json(text: str, where: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must hold a JSON object (a Hugging Face config.json)")
    return data


def bundled_models() -> list[ModelSpec]:
    """Every bundled model, sorted by name."""
    folder = resources.files("tokenmill.planner").joinpath("configs")
    specs = []
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            where = f"bundled {entry.name}"
            specs.append(_spec_from_mapping(_parse_json(entry.read_text(encoding="utf-8"), where), entry.name))
    return sorted(specs, key=lambda s: s.name.lower())


def load_config_file(path: str | Path) -> ModelSpec:
    """A model from a config.json path (or a directory that holds one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read model config {p}: {exc}") from exc
    name = p.parent.name if p.name == "config.json" else p.stem
    return _spec_from_mapping(_parse_json(text, str(p)), name or str(p))


def load_model(name_or_path: str) -> ModelSpec:
    """A bundled model by name/alias, or a config.json on disk."""
    key = normalize_name(name_or_path)
    models = bundled_models()
    for spec in models:
        if key in {normalize_name(n) for n in (spec.name, *spec.aliases)}:
            return spec
    p = Path(name_or_path)
    if p.exists():
        return load_config_file(p)
    known = ", ".join(s.aliases[0] if s.aliases else s.name for s in models)
    raise ConfigError(
        f"unknown model {name_or_path!r}: not a bundled model ({known}) and no such file; "
        "pass a path to the model's config.json"
    )
