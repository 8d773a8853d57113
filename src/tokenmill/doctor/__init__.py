"""The doctor: what limits a fleet's throughput, the numbers that show it, and the flags that would help.

``diagnose(observation, spec, predictor)`` runs the rule table (:mod:`tokenmill.doctor.rules`) and returns
:class:`Verdict` objects; :class:`PlannerPredictor` adds the planner's before/after numbers.
"""

from __future__ import annotations

from tokenmill.doctor.engine import DoctorState, binding, diagnose
from tokenmill.doctor.model import (
    ClientObs,
    ClientSide,
    Observation,
    PlanPoint,
    Prediction,
    ServerObs,
    Verdict,
)
from tokenmill.doctor.predict import PlannerPredictor, Predictor
from tokenmill.doctor.render import format_verdict, format_verdicts

__all__ = [
    "ClientObs",
    "ClientSide",
    "DoctorState",
    "Observation",
    "PlanPoint",
    "PlannerPredictor",
    "Prediction",
    "Predictor",
    "ServerObs",
    "Verdict",
    "binding",
    "diagnose",
    "format_verdict",
    "format_verdicts",
]
