"""How hard a chaos run pushes: the full run (``make chaos``) and the quick one (``--quick``, in ``make test``).

Every random choice of a run comes from ``seed``; sizes and durations are chosen so the full run takes a few
minutes on 2 cores and the quick one under a minute and a half.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True, slots=True)
class KillPlan:
    """When the client is killed after each start: a mix of moments (seconds after the start)."""

    startup_share: float = 0.2  # while importing, resuming, repairing: uniform in startup_s
    startup_s: tuple[float, float] = (0.05, 1.6)
    resumed_share: float = 0.1  # the moment it logs that it resumes (repaired, store claimed, uploads queued)
    seal_share: float = 0.2  # right after the next shard is sealed (at most seal_wait_s after the start)
    seal_wait_s: float = 6.0
    term_share: float = 0.1  # SIGTERM (a graceful stop) in the middle of generating, instead of SIGKILL
    term_wait_s: float = 30.0  # it must have stopped by then (requests in flight, then pending uploads)
    run_s: tuple[float, float] = (1.2, 5.0)  # the rest: SIGKILL in the middle of generating


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One chaos run's parameters (see :meth:`full_run` and :meth:`quick_run`)."""

    seed: int
    quick: bool
    kills: int  # SIGKILLs of the client, at least
    prompts: int
    servers: int
    shard_size: int
    concurrency: int  # per server, while the client is being killed
    final_concurrency: int  # per server, for the last uninterrupted run
    time_scale: float  # the simulated servers' speed (smaller: faster)
    output_len_mean: int
    read_timeout_s: float
    stall_s: float  # longer than read_timeout_s: a stall is a read timeout for the client
    fault_rate: tuple[float, float]  # rate of the one fault kind a window injects
    window_s: float  # how long a fault window lasts at least
    window_max_s: float  # ... and at most, waiting for min_hits injections
    min_hits: int
    server_kills: int  # SIGKILL one server
    server_terms: int  # SIGTERM one server (a graceful stop, then a restart)
    fleet_kills: int  # SIGKILL every server at once
    store_outages: int
    store_outage_s: float
    disk_fulls: int
    disk_mb: int  # size of the tmpfs holding the output
    disk_full_hold_s: float  # longest wait for the client to stop on the full disk
    phase_max_s: float  # the killing phase ends by then, whatever happened
    final_max_s: float  # the last run must finish (and upload) within this
    progress_window_s: float  # a start alive this long must have recorded something (or said why)
    tear_share: float  # share of kills followed by a simulated machine crash tearing a file's tail
    long_prompt_every: int  # every n-th prompt is longer than the servers' context: a recorded failure
    kill_plan: KillPlan = field(default_factory=KillPlan)
    connect_timeout_s: float = 2.0  # the job's retry.connect_timeout_s (with read_timeout_s: a request's limit)
    server_stops: int = 2  # SIGSTOP one server: frozen, it must be killed and restarted by the fleet's watchdog
    machine_losses: int = 4  # the client SIGKILLed and its whole output directory deleted (a machine gone)
    machine_loss_wait_s: float = 20.0  # at most this long for a start to upload a new shard before it is lost
    workdir: Path | None = None
    json_path: Path | None = None

    @classmethod
    def full_run(cls, seed: int, kills: int = 50) -> ChaosConfig:
        """A few minutes: ``kills`` client SIGKILLs, every fault kind in several windows, all at once too."""
        return cls(
            seed=seed,
            quick=False,
            kills=kills,
            prompts=max(1000, 150 * kills),
            servers=3,
            shard_size=40,
            concurrency=4,
            final_concurrency=24,
            time_scale=0.25,
            output_len_mean=40,
            read_timeout_s=2.0,
            stall_s=30.0,
            fault_rate=(0.15, 0.35),
            window_s=7.0,
            window_max_s=15.0,
            min_hits=3,
            server_kills=8,
            server_terms=2,
            fleet_kills=2,
            store_outages=2,
            store_outage_s=15.0,
            disk_fulls=2,
            disk_mb=64,
            disk_full_hold_s=40.0,
            phase_max_s=260.0,
            final_max_s=120.0,
            progress_window_s=6.0,
            tear_share=0.3,
            long_prompt_every=200,
        )

    @classmethod
    def quick_run(cls, seed: int, kills: int = 5) -> ChaosConfig:
        """Under a minute and a half: a few kills, each fault kind once."""
        return replace(
            cls.full_run(seed, kills),
            quick=True,
            prompts=1000,
            servers=2,
            shard_size=25,
            window_s=1.5,
            window_max_s=8.0,
            fault_rate=(0.4, 0.4),
            min_hits=2,
            server_kills=1,
            server_terms=1,
            fleet_kills=1,
            store_outages=1,
            store_outage_s=3.0,
            disk_fulls=1,
            disk_mb=16,
            disk_full_hold_s=25.0,
            phase_max_s=60.0,
            final_max_s=40.0,
            tear_share=1.0,
            long_prompt_every=100,
            server_stops=1,
            machine_losses=2,
        )
