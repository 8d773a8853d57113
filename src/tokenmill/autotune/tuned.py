"""What autotune kept, written back: ``PROFILE.tuned.yaml`` beside the profile, with the flags the fleet ended on.

After ``run --fleet F --autotune`` or ``fleet tune F`` has kept a change, the fleet's own flags are no longer the
profile's. :func:`keep_tuned` writes ``F.tuned.yaml`` (``fleet.yaml`` -> ``fleet.tuned.yaml``): the profile's
own mapping as it was read (every other field untouched) with ``flags`` replaced by the fleet's, a comment naming
each kept change with its predicted and measured gain, written atomically; and returns the flag diff to print.
``tokenmill fleet up F.tuned.yaml`` (or ``run --fleet F.tuned.yaml``) then starts with them. The profile itself
is never rewritten; ``fleet up F`` says when a newer ``F.tuned.yaml`` lies beside it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tokenmill.config import FlagValue
from tokenmill.config.base import read_mapping
from tokenmill.output.fsio import atomic_write

SUFFIX = ".tuned.yaml"


def tuned_path(profile_path: str | Path) -> Path:
    """``fleet.yaml`` -> ``fleet.tuned.yaml`` (a profile already tuned is tuned again in place)."""
    p = Path(profile_path)
    if p.name.endswith(SUFFIX):
        return p
    return p.with_name(f"{p.stem}{SUFFIX}")


def _word(name: str, value: FlagValue) -> str:
    if value is True:
        return f"--{name}"
    if value is False or value is None:
        return f"--{name} (off)"
    return f"--{name} {value}"


def flag_diff(before: Mapping[str, FlagValue], after: Mapping[str, FlagValue]) -> list[str]:
    """``- --flag old`` / ``+ --flag new`` lines, in the order the flags appear (removed, changed, added)."""
    lines: list[str] = []
    for name, value in before.items():
        if name not in after or after[name] != value:
            lines.append(f"- {_word(name, value)}")
            if name in after:
                lines.append(f"+ {_word(name, after[name])}")
    lines += [f"+ {_word(name, value)}" for name, value in after.items() if name not in before]
    return lines


@dataclass(frozen=True)
class KeptChange:
    """One change autotune kept (rolled out to every server)."""

    change: str
    predicted_gain: float
    measured_gain: float | None


@dataclass(frozen=True)
class Tuned:
    """Where the tuned profile went and what differs from the profile."""

    path: Path
    diff: list[str]

    def lines(self) -> list[str]:
        """What to print: the file, the diff and how to start with it."""
        return [
            f"autotune's kept flags written to {self.path}:",
            *(f"  {line}" for line in self.diff),
            f"start the fleet with them: tokenmill fleet up {self.path}",
        ]


def keep_tuned(
    profile_path: str | Path,
    flags: Mapping[str, FlagValue],
    kept: Sequence[KeptChange],
    *,
    now: datetime.datetime | None = None,
) -> Tuned | None:
    """Write ``PROFILE.tuned.yaml`` with ``flags`` (the fleet's at the end) when they differ from the profile's;
    None when they do not (nothing was kept, or the profile already holds them). ConfigError when the profile
    cannot be read, OutputError when the file cannot be written."""
    source = Path(profile_path)
    data = read_mapping(source, "fleet profile", "fleet fields (engine, model, flags, gpus, ...)")
    before = dict(data.get("flags") or {})
    after = dict(flags)
    diff = flag_diff(before, after)
    if not diff:
        return None
    data["flags"] = after
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    head = [f"# {source.name} with the flags autotune kept ({stamp}); start with: tokenmill fleet up <this file>"]
    for k in kept:
        measured = "?" if k.measured_gain is None else f"{k.measured_gain:+.0%}"
        head.append(f"# kept: {k.change} (predicted {k.predicted_gain:+.0%}, measured {measured})")
    text = "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)
    target = tuned_path(source)
    atomic_write(target, text.encode())
    return Tuned(target, diff)


def newer_tuned(profile_path: str | Path) -> Path | None:
    """The ``PROFILE.tuned.yaml`` beside ``profile_path`` when it is newer than the profile, else None."""
    p = Path(profile_path)
    tuned = tuned_path(p)
    if tuned == p or not tuned.exists():
        return None
    try:
        return tuned if tuned.stat().st_mtime >= p.stat().st_mtime else None
    except OSError:
        return None
