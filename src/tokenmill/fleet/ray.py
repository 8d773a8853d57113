"""The fleet on a Ray cluster (``tokenmill[ray]``): each server is a Ray actor reserving its GPUs.

An actor asks Ray for ``tp_size`` GPUs and no CPU (a GPU actor holding a CPU for its lifetime would starve
the cluster's CPU tasks), so Ray places it on a node with free GPUs and sets its ``CUDA_VISIBLE_DEVICES``.
Inside, a :class:`~tokenmill.fleet.keeper.ServerKeeper` runs the server exactly as a local fleet does
(command template, log, health, crash restarts). If the actor itself dies, Ray restarts it (up to
``max_restarts``) and the server starts again, possibly on another port: the driver re-reads every
actor's endpoint each time it publishes, so the endpoints file follows.

Every node needs the same environment (tokenmill and the engine installed); server logs are written to
``state_dir`` on the node that runs the server.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tokenmill.config import FleetSpec
from tokenmill.errors import ConfigError
from tokenmill.fleet.keeper import ServerKeeper
from tokenmill.fleet.state import ServerStatus, server_log
from tokenmill.fleet.supervisor import Fleet, ServerHandle

log = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 5.0
ACTOR_CONCURRENCY = 4  # status calls must be answered while a restart call waits for health
PLACEMENT_GRACE_S = 120.0  # how long an actor may wait for free GPUs before its start counts as failed


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``local``: start a one-machine cluster), once per process."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("Ray is not installed: pip install 'tokenmill[ray]'") from exc
    if ray.is_initialized():
        return
    try:
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc


class ServerActor:
    """One server on one Ray node (used as a Ray actor; see the module docstring)."""

    def __init__(self, profile_data: dict[str, Any], index: int, log_path: str) -> None:
        import ray

        profile = FleetSpec.model_validate(profile_data)
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        self.node = str(ray.get_runtime_context().get_node_id())
        node_ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.keeper = ServerKeeper(
            profile, index, gpus, Path(log_path), node_ip=node_ip, set_visible_devices=False
        )  # Ray has set CUDA_VISIBLE_DEVICES for this actor; the server inherits it
        self.keeper.start()

    def wait_started(self, timeout: float | None) -> str | None:
        return self.keeper.wait_started(timeout)

    def status(self) -> dict[str, Any]:
        st = self.keeper.status()
        st.node = self.node
        return st.to_dict()

    def restart(self, profile_data: dict[str, Any], timeout: float | None) -> str | None:
        return self.keeper.restart(FleetSpec.model_validate(profile_data), timeout)

    def stop(self) -> None:
        self.keeper.stop()


class RayHandle:
    """The driver's side of a :class:`ServerActor`: Ray errors become statuses and messages."""

    def __init__(self, actor: Any, index: int, gpus: list[int], start_timeout_s: float) -> None:
        self.actor = actor
        self.index = index
        self.start_timeout_s = start_timeout_s + PLACEMENT_GRACE_S  # the first start waits for placement too
        self._last = ServerStatus(index=index, url="", state="starting", gpus=gpus)

    def wait_started(self, timeout: float | None = None) -> str | None:
        import ray

        timeout = timeout if timeout is not None else self.start_timeout_s
        try:
            return ray.get(self.actor.wait_started.remote(None), timeout=timeout)  # type: ignore[no-any-return]
        except ray.exceptions.GetTimeoutError:
            return (
                f"server {self.index} was not placed or not healthy within {timeout:.0f} s: the cluster may lack "
                f"{len(self._last.gpus)} free GPU(s) on one node (see `ray status`)"
            )
        except ray.exceptions.RayError as exc:
            return f"server {self.index}: its Ray actor failed: {exc}"

    def status(self) -> ServerStatus:
        import ray

        try:
            data = ray.get(self.actor.status.remote(), timeout=STATUS_TIMEOUT_S)
        except ray.exceptions.ActorDiedError as exc:
            self._last.state, self._last.pid, self._last.error = "failed", None, f"Ray actor died: {exc}"
        except ray.exceptions.RayError as exc:  # restarting (unavailable) or slow: down until it answers
            self._last.state, self._last.pid = "down", None
            self._last.error = f"Ray actor unavailable: {type(exc).__name__}"
        else:
            self._last = ServerStatus.from_dict(data)
        return ServerStatus.from_dict(self._last.to_dict())

    def restart(self, profile: FleetSpec, timeout: float | None = None) -> str | None:
        import ray

        try:
            return ray.get(  # type: ignore[no-any-return]
                self.actor.restart.remote(profile.model_dump(mode="json"), timeout), timeout=None
            )
        except ray.exceptions.RayError as exc:
            return f"server {self.index}: its Ray actor failed during the restart: {exc}"

    def stop(self) -> None:
        import ray

        try:
            ray.get(self.actor.stop.remote(), timeout=60)
        except ray.exceptions.RayError as exc:
            log.warning("server %d: stopping its Ray actor: %s", self.index, exc)
        ray.kill(self.actor)


def start_ray(profile: FleetSpec, state_dir: Path) -> list[ServerHandle]:
    """One actor per server, each reserving ``tp_size`` GPUs and no CPU."""
    import ray

    actor_cls = ray.remote(ServerActor)
    handles: list[ServerHandle] = []
    for index, gpus in enumerate(profile.gpu_groups()):
        actor = actor_cls.options(
            num_gpus=profile.tp_size,
            num_cpus=0,
            max_restarts=profile.max_restarts,
            max_concurrency=ACTOR_CONCURRENCY,
        ).remote(profile.model_dump(mode="json"), index, str(server_log(state_dir, index)))
        handles.append(RayHandle(actor, index, list(gpus), profile.start_timeout_s))
    return handles


def ray_fleet(profile: FleetSpec, address: str, state_dir: Path | None = None) -> Fleet:
    """A fleet whose servers are Ray actors on the cluster at ``address``; ``up()`` it to start them."""
    connect(address)
    if not profile.host or profile.host.startswith("127.") or profile.host == "localhost":
        log.info("servers bind %s: only clients on the same node can reach them", profile.host)
    return Fleet(profile, start_ray, state_dir, kind="ray")
