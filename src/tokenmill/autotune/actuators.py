"""The fleet's side of ``--autotune``: a doctor change turned into profile flags, checked against the profile's
allow-list, and applied to some servers through the rolling re-flag.

:class:`FleetActuator` drives a :class:`~tokenmill.fleet.supervisor.Fleet` of this process (``run --fleet F
--autotune``); :class:`RemoteActuator` a fleet whose supervisor is another process (``fleet tune F``), through
re-flag requests in its state directory. Both are the :class:`~tokenmill.autotune.loop.Actuator` the tuner uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tokenmill.config import AutotuneSpec, FlagValue, FleetSpec
from tokenmill.errors import ConfigError, ServerError
from tokenmill.fleet.daemon import wait_apply
from tokenmill.fleet.state import FleetState, load_state, pid_alive, request_apply
from tokenmill.fleet.supervisor import Fleet

Say = Callable[[str], None]
# one flag under two names (SGLang 0.5.14 renamed them; the fleet writes the engine's own spelling)
ALIASES = {
    "mamba-scheduler-strategy": "mamba-radix-cache-strategy",
    "cuda-graph-max-bs": "cuda-graph-max-bs-decode",
}
REMOTE_POLL_S = 0.5


def canonical(name: str) -> str:
    name = name.lstrip("-")
    return ALIASES.get(name, name)


def _value(text: str) -> FlagValue:
    for kind in (int, float):
        try:
            return kind(text)  # type: ignore[no-any-return]
        except ValueError:
            continue
    return text


def parse_change(change: str) -> dict[str, FlagValue]:
    """``"--disable-radix-cache --max-running-requests 96"`` -> ``{"disable-radix-cache": True,
    "max-running-requests": 96}``; ConfigError for a word that is not a launch flag."""
    words = change.split()
    flags: dict[str, FlagValue] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or len(word) < 3:
            raise ConfigError(f"{change!r} is not a set of launch flags ({word!r})")
        name, eq, inline = word[2:].partition("=")
        if eq:
            flags[name] = _value(inline)
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[name] = _value(words[i + 1])
            i += 1
        else:
            flags[name] = True
        i += 1
    return flags


def refusal(change: str, allow: Sequence[str]) -> str | None:
    """None when every flag of ``change`` is in ``allow`` (aliases count as one flag), else why not."""
    try:
        flags = parse_change(change)
    except ConfigError as exc:
        return str(exc)
    allowed = {canonical(a) for a in allow}
    outside = [name for name in flags if canonical(name) not in allowed]
    if outside:
        return (
            f"{', '.join('--' + n for n in outside)} not in the profile's autotune.allow "
            "(add it there to let the tuner change it)"
        )
    return None


def profile_with(profile: FleetSpec, change: str) -> FleetSpec:
    """``profile`` with ``change``'s flags set (a flag's other spelling removed)."""
    flags = dict(profile.flags)
    for name, value in parse_change(change).items():
        for key in [k for k in flags if canonical(k) == canonical(name)]:
            del flags[key]
        flags[name] = value
    return profile.model_copy(update={"flags": flags})


def _indices(urls_in_order: Sequence[str], urls: Sequence[str]) -> list[int]:
    wanted = set(urls)
    found = [i for i, u in enumerate(urls_in_order) if u in wanted]
    if len(found) != len(wanted):
        missing = wanted - set(urls_in_order)
        raise ServerError(f"no such server in the fleet: {', '.join(sorted(missing))}")
    return found


class FleetActuator:
    """The tuner's hands on a fleet of this process."""

    def __init__(self, fleet: Fleet, spec: AutotuneSpec) -> None:
        self.fleet = fleet
        self.spec = spec

    def servers(self) -> list[str]:
        return self.fleet.urls()

    def refuse(self, change: str) -> str | None:
        return refusal(change, self.spec.allow)

    def apply(self, change: str, urls: Sequence[str], say: Say) -> None:
        new = profile_with(self.fleet.profile, change)
        self.fleet.apply(new, say, servers=_indices(self.servers(), urls), batch=self.spec.rollout_batch)

    def revert(self, urls: Sequence[str], say: Say) -> None:
        servers = _indices(self.servers(), urls)
        drain = min(self.fleet.profile.drain_timeout_s, self.spec.rollback_drain_s)
        self.fleet.apply(self.fleet.profile, say, servers=servers, batch=self.spec.rollout_batch, drain_timeout_s=drain)


class RemoteActuator:
    """The tuner's hands on a fleet whose supervisor runs elsewhere (``tokenmill fleet up``): re-flag requests
    in its state directory, waited for through ``state.json``."""

    def __init__(self, state_dir: Path, spec: AutotuneSpec) -> None:
        self.state_dir = state_dir
        self.spec = spec

    def _state(self) -> FleetState:
        state = load_state(self.state_dir)
        if not pid_alive(state.supervisor_pid):
            raise ServerError(f"the fleet of {self.state_dir} is not running: start it with `tokenmill fleet up`")
        return state

    def profile(self) -> FleetSpec:
        return FleetSpec.model_validate(self._state().profile)

    def servers(self) -> list[str]:
        return [s.url for s in self._state().servers]

    def refuse(self, change: str) -> str | None:
        return refusal(change, self.spec.allow)

    def apply(self, change: str, urls: Sequence[str], say: Say) -> None:
        self._request(profile_with(self.profile(), change), urls, say)

    def revert(self, urls: Sequence[str], say: Say) -> None:
        profile = self.profile()
        self._request(profile, urls, say, min(profile.drain_timeout_s, self.spec.rollback_drain_s))

    def _request(self, profile: FleetSpec, urls: Sequence[str], say: Say, drain: float | None = None) -> None:
        indices = _indices(self.servers(), urls)
        request_id = request_apply(
            self.state_dir, profile, servers=indices, batch=self.spec.rollout_batch, drain_timeout_s=drain
        )
        wait_apply(self.state_dir, request_id, say, poll_s=REMOTE_POLL_S)
