"""``tokenmill fleet tune PROFILE.yaml``: the autotune loop on a fleet that is already up, beside any runs.

It watches the fleet's servers as a run's monitor does (scrapes, the doctor's confirmed verdicts, with the
client's side read from a run's event log when ``out`` names its output directory), drives an
:class:`~tokenmill.autotune.loop.Autotuner` through the supervisor's re-flag requests
(:class:`~tokenmill.autotune.actuators.RemoteActuator`), and records every step in ``STATE_DIR/autotune.jsonl``.
It ends when the tuner has tried ``max_changes`` changes; interrupted, it first leaves the fleet on one profile
(a re-flag under way finishes, a canary being measured goes back to the fleet's flags).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

from tokenmill.autotune.actuators import RemoteActuator
from tokenmill.autotune.loop import Autotuner, Change, Phase
from tokenmill.config import AutotuneSpec, MonitorSpec
from tokenmill.doctor import ClientObs, ClientSide, DoctorState, Observation, PlannerPredictor, ServerObs, diagnose
from tokenmill.doctor.oneshot import client_from_tick, with_run_requests
from tokenmill.monitor.events import EVENTS_FILE, EventLog, last_events
from tokenmill.monitor.fleet import FleetMonitor, ServerView

AUTOTUNE_LOG = "autotune.jsonl"


def _client(out: Path | None) -> tuple[dict[str, ClientSide], ClientObs, float | None]:
    """The client's side from a run's last tick (in flight, limits, lengths), the kind of its requests (its job
    record) and its ETA; nothing without the run."""
    if out is None:
        return {}, ClientObs(), None
    tick = last_events(out / EVENTS_FILE, kinds=("tick",)).get("tick")
    if tick is None:
        return {}, with_run_requests(out, ClientObs()), None
    sides, client = client_from_tick(tick)
    eta = (tick.get("client") or {}).get("eta_s")
    return sides, with_run_requests(out, client), float(eta) if isinstance(eta, int | float) else None


async def tune(state_dir: Path, spec: AutotuneSpec, monitor: MonitorSpec, out: Path | None = None) -> list[Change]:
    """Tune the fleet of ``state_dir`` until ``spec.max_changes`` changes were tried; returns them."""
    actuator = RemoteActuator(state_dir, spec)
    doctor_spec = monitor.doctor
    # at least two scrapes in each part of a measurement window (a long window keeps the monitor's interval)
    interval = max(0.2, min(monitor.scrape_interval_s, spec.window_s / (2 * spec.sub_windows)))
    fleet = FleetMonitor(
        actuator.servers(),
        interval_s=interval,
        timeout_s=monitor.scrape_timeout_s,
        window_s=monitor.rate_window_s,
        flap_window_s=doctor_spec.flap_window_s,
    )
    events = EventLog(state_dir / AUTOTUNE_LOG, uuid.uuid4().hex[:12], time.time)
    tuner = Autotuner(spec, actuator)
    tuner.bind(emit=lambda record: events.write("autotune", **record), refresh=fleet.refresh_info)
    doctor = DoctorState(doctor_spec.confirm_rounds)
    predictor = PlannerPredictor(monitor.planner_model, monitor.gpu, gpu_file=monitor.gpu_file)
    done = asyncio.Event()

    async def on_round(views: list[ServerView]) -> None:
        sides, client, eta = _client(out)
        obs = Observation(tuple(ServerObs(v, sides.get(v.url, ClientSide())) for v in views), client)
        verdicts = await asyncio.to_thread(diagnose, obs, doctor_spec, predictor)
        doctor.update(verdicts)
        confirmed = [v for v in doctor.shown if doctor.confirmed(v.rule) >= doctor.confirm]
        tuner.round(views, confirmed, eta)
        if tuner.phase is Phase.DONE:
            done.set()

    task = asyncio.create_task(fleet.run(on_round), name="tokenmill-fleet-tune")
    try:
        await done.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.to_thread(tuner.settle)
        events.close()
    return tuner.changes
