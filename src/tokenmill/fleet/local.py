"""Servers on this machine: one :class:`~tokenmill.fleet.keeper.ServerKeeper` (a thread) per server.

with local_fleet(load_profile("fleet.yaml")) as fleet:
    job = job.model_copy(update={"servers": [], "servers_file": str(fleet.endpoints_path)})
    ...
"""

from __future__ import annotations

from pathlib import Path

from tokenmill.config import FleetSpec
from tokenmill.fleet.keeper import ServerKeeper
from tokenmill.fleet.state import server_log
from tokenmill.fleet.supervisor import Fleet, ServerHandle


def start_local(profile: FleetSpec, state_dir: Path) -> list[ServerHandle]:
    """One keeper per GPU group, each started (their servers come up in parallel)."""
    keepers = [
        ServerKeeper(profile, index, gpus, server_log(state_dir, index))
        for index, gpus in enumerate(profile.gpu_groups())
    ]
    for keeper in keepers:
        keeper.start()
    return list(keepers)


def local_fleet(profile: FleetSpec, state_dir: Path | None = None) -> Fleet:
    """A fleet of local servers; ``up()`` it (or use it as a context manager, which also stops it)."""
    return Fleet(profile, start_local, state_dir, kind="local")
