"""The doctor's inputs for tests: observations from the recorded /metrics fixtures and the verdicts drawn from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tokenmill.config import DoctorSpec
from tokenmill.doctor import ClientObs, ClientSide, Observation, PlannerPredictor, ServerObs, Verdict, diagnose
from tokenmill.monitor.fleet import FleetMonitor
from tokenmill.monitor.info import parse_server_info
from tokenmill.monitor.scrape import ServerSnapshot, parse_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "doctor"


URL = "http://10.0.0.7:30000"


def fixture(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def observe(
    name: str,
    *,
    scrapes: list[str | None] | None = None,
    client: dict[str, Any] | None = None,
    process: dict[str, Any] | None = None,
    server_info: dict[str, Any] | None = None,
) -> Observation:
    """Replay a fixture's scrapes through the monitor and pair the view with the client's side."""
    doc = fixture(name)
    raw_info = server_info if server_info is not None else doc.get("server_info")
    info = parse_server_info(raw_info) if raw_info else None
    fleet = FleetMonitor([URL], window_s=120.0, flap_window_s=600.0)
    view = None
    for i, text in enumerate(scrapes if scrapes is not None else doc["scrapes"]):
        t = i * float(doc["interval_s"])
        snap = parse_metrics(text, t) if text else ServerSnapshot("unknown", t, False, error="connection refused")
        view = fleet.ingest(URL, snap, info)
    assert view is not None
    side = ClientSide(**(client if client is not None else doc.get("client") or {}))
    return Observation((ServerObs(view, side),), ClientObs(**(process or doc.get("process") or {})))


def verdicts(
    obs: Observation, spec: DoctorSpec | None = None, model: str | None = None, gpu: str | None = None
) -> dict[str, Verdict]:
    found = diagnose(obs, spec or DoctorSpec(), PlannerPredictor(model, gpu) if model or gpu else None)
    return {v.rule: v for v in found}


def evidence(v: Verdict) -> dict[str, str]:
    return dict(v.evidence)
