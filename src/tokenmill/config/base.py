"""The config models' common base (unknown fields refused), error formatting and small helpers every spec uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from tokenmill.errors import ConfigError

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")  # as storage/place.py tells a URL (config cannot import it)


class Model(BaseModel):
    """Every config model: an unknown field is an error (a misspelt key never passes silently)."""

    model_config = ConfigDict(extra="forbid", frozen=False)


def local_path(value: str, field: str, instead: str) -> str:
    """``value`` when it is a local path; a URL is a ValueError naming ``field`` and saying what to do instead (a
    URL is never made into a local path such as ``./s3:/bucket/x``)."""
    if _URL.match(value):
        shown = re.sub(r"^([a-zA-Z0-9+.-]+://)[^/@]*@", r"\1", value)  # no user:password@
        raise ValueError(f"{field} is a local directory, not a URL ({shown}); {instead}")
    return value


def normalize_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; strips a trailing slash and a trailing ``/v1``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def _fix_hint(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add this field"
    if kind == "extra_forbidden":
        return "remove it or check the spelling"
    if kind in ("literal_error", "enum"):
        return "use one of the allowed values"
    return "correct the value"


def format_validation_error(exc: ValidationError, where: str) -> str:
    """One line per bad field: ``field.path: problem (fix)``."""
    lines = [f"{where} is invalid:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {loc}: {err['msg']} -> {_fix_hint(dict(err))}")
    return "\n".join(lines)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating levels as needed."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def read_mapping(path: Path, what: str, fields: str) -> dict[str, Any]:
    """The YAML mapping in ``path`` (a ``what``: "job file", "fleet profile"); ConfigError when it cannot be read,
    is not YAML, or is not a mapping (``fields`` names a few of the fields it should hold)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of {fields}")
    return data
