"""``tokenmill run --fleet PROFILE.yaml [--ray-address ADDR] [--partitions N] [--autotune]``: a run with its own fleet.

The fleet is started before the run and stopped after it, whatever happens; the run follows the fleet's
endpoints file (restarts, re-flags). With ``--partitions N`` the input is split in N disjoint parts, each
run by its own client as a Ray task (see :mod:`tokenmill.run.partitions`). With ``--autotune`` the run's
monitor drives an :class:`~tokenmill.autotune.loop.Autotuner` on the fleet (the profile's ``autotune`` section:
what it may change and how a change is measured).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.autotune.actuators import FleetActuator
from tokenmill.autotune.loop import Autotuner, Change
from tokenmill.autotune.tuned import KeptChange, keep_tuned
from tokenmill.config import FleetSpec, JobSpec, load_profile
from tokenmill.errors import ConfigError, OutputError
from tokenmill.fleet.state import ENDPOINTS
from tokenmill.fleet.supervisor import Fleet

log = logging.getLogger(__name__)


def start_fleet(profile: FleetSpec, ray_address: str | None = None, state_dir: Path | None = None) -> Fleet:
    """Start ``profile``'s servers here, or as Ray actors when ``ray_address`` is given; returns once healthy."""
    if ray_address:
        from tokenmill.fleet.ray import ray_fleet

        return ray_fleet(profile, ray_address, state_dir).up()
    from tokenmill.fleet.local import local_fleet

    return local_fleet(profile, state_dir).up()


def write_kept(profile_path: str | Path, flags: dict[str, Any], changes: list[Change]) -> None:
    """After a tuner is done: write the flags the fleet ended on beside the profile when it kept a change, and
    say where (:mod:`tokenmill.autotune.tuned`); a failure to write is said, never raised (the run is over)."""
    kept = [
        KeptChange(c.change, c.predicted_gain, c.measured.gain if c.measured is not None else None)
        for c in changes
        if c.outcome == "kept" and not c.dry_run
    ]
    if not kept:
        return
    try:
        tuned = keep_tuned(profile_path, flags, kept)
    except (ConfigError, OutputError) as exc:
        log.error("autotune kept %s but its flags could not be written beside the profile: %s", kept[0].change, exc)
        return
    if tuned is not None:
        for line in tuned.lines():
            log.warning("%s", line)


@dataclass
class FleetLaunch:
    """What ``run``'s fleet options asked for."""

    profile_path: str | None = None
    ray_address: str | None = None
    partitions: int = 1
    autotune: bool = False
    autotune_dry_run: bool = False

    @classmethod
    def pop_options(cls, fields: dict[str, Any]) -> FleetLaunch:
        """Take ``--fleet``, ``--ray-address`` and ``--partitions`` out of the command's options."""
        launch = cls(
            fields.pop("fleet_file", None),
            fields.pop("ray_address", None),
            fields.pop("partitions", None) or 1,
            bool(fields.pop("autotune", False)),
            bool(fields.pop("autotune_dry_run", False)),
        )
        if launch.autotune_dry_run:
            launch.autotune = True
        if launch.autotune and not launch.profile_path:
            raise ConfigError(
                "--autotune changes the flags of a fleet the run starts: give --fleet PROFILE.yaml too "
                "(for a fleet already up, use `tokenmill fleet tune PROFILE.yaml` beside the run)"
            )
        if launch.autotune and launch.partitions > 1:
            raise ConfigError(
                "--autotune needs the one client of a run (it reads the client's side of every server): "
                "drop --partitions, or tune the fleet with `tokenmill fleet tune` beside the partitions"
            )
        if launch.partitions < 1:
            raise ConfigError("--partitions must be at least 1")
        if launch.partitions > 1 and not launch.ray_address:
            raise ConfigError("--partitions runs its clients as Ray tasks: give --ray-address too (e.g. local)")
        return launch

    def profile(self) -> FleetSpec | None:
        return load_profile(self.profile_path) if self.profile_path else None

    def job_overrides(self) -> dict[str, Any]:
        """With a fleet, the job's servers are the fleet's endpoints file."""
        profile = self.profile()
        if profile is None:
            return {}
        return {"servers": [], "servers_file": str(Path(profile.state_dir).absolute() / ENDPOINTS)}

    def run(
        self,
        job: JobSpec,
        execute: Callable[[JobSpec, Autotuner | None], None],
        execute_partitions: Callable[[JobSpec, int, str], None],
    ) -> None:
        """Start the fleet (if any), run the job (partitioned or not: the caller's two ways; with the tuner when
        --autotune asked for one), stop the fleet."""
        with self._fleet() as fleet:
            if self.partitions > 1:
                assert self.ray_address is not None
                execute_partitions(job, self.partitions, self.ray_address)
            else:
                tuner = self._tuner(fleet)
                try:
                    execute(job, tuner)
                finally:
                    if tuner is not None and fleet is not None and self.profile_path:
                        write_kept(self.profile_path, fleet.profile.flags, tuner.changes)

    def _tuner(self, fleet: Fleet | None) -> Autotuner | None:
        if not self.autotune or fleet is None:
            return None
        spec = fleet.profile.autotune
        if self.autotune_dry_run:
            spec = spec.model_copy(update={"dry_run": True})
        log.info("autotune on: it may change %s", ", ".join(spec.allow) or "nothing (autotune.allow is empty)")
        return Autotuner(spec, FleetActuator(fleet, spec))

    @contextlib.contextmanager
    def _fleet(self) -> Iterator[Fleet | None]:
        profile = self.profile()
        if profile is None:
            yield None
            return
        fleet = start_fleet(profile, self.ray_address)
        try:
            yield fleet
        finally:
            log.info("run over: stopping the fleet it started")
            fleet.down()
