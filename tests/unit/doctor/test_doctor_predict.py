"""The doctor's seam to the planner: what the planner refuses (its ConfigError) is no prediction, said at INFO; any
other error is a bug in the planner and is logged with its traceback, never passed off as "no prediction"."""

from __future__ import annotations

import importlib
import logging

import pytest

from tokenmill.doctor.model import Candidate, ClientObs, ServerObs
from tokenmill.doctor.predict import PlannerPredictor
from tokenmill.errors import DoesNotFitError
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.info import ServerInfo

INFO = ServerInfo(None, model_path="qwen3.6-27b", gpu="rtx-pro-6000")
OBS = ServerObs(ServerView("http://t", None, INFO, True, None))
CLIENT = ClientObs(avg_prompt_tokens=1000.0, avg_output_tokens=2000.0)
CANDIDATE = Candidate("--max-running-requests 64", ("--max-running-requests", "64"))


def _planner_raising(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise exc

    monkeypatch.setattr(importlib.import_module("tokenmill.planner.plan"), "plan", broken)


def _predictions(p: PlannerPredictor) -> list[object]:
    return [p(OBS, CLIENT, CANDIDATE), p.today(OBS, CLIENT), p.expected(OBS, CLIENT), p.capacity(OBS, CLIENT)]


def test_the_predictor_predicts_with_a_working_planner() -> None:
    assert all(x is not None for x in _predictions(PlannerPredictor()))


def test_a_configuration_the_planner_refuses_is_no_prediction_at_info(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _planner_raising(monkeypatch, DoesNotFitError("the weights do not fit"))
    with caplog.at_level(logging.INFO, logger="tokenmill.doctor"):
        assert _predictions(PlannerPredictor()) == [None] * 4
    said = [r for r in caplog.records if "the weights do not fit" in r.getMessage()]
    assert len(said) == 4 and all(r.levelno == logging.INFO and r.exc_info is None for r in said)


def test_a_bug_in_the_planner_is_logged_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _planner_raising(monkeypatch, ZeroDivisionError("division by zero"))
    with caplog.at_level(logging.INFO, logger="tokenmill.doctor"):
        assert _predictions(PlannerPredictor()) == [None] * 4
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 4
    assert all(r.exc_info is not None and isinstance(r.exc_info[1], ZeroDivisionError) for r in errors)


def test_an_unknown_model_is_no_prediction_but_a_broken_catalog_is_a_bug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tokenmill.doctor"):
        assert PlannerPredictor(model="no-such-model")(OBS, CLIENT, CANDIDATE) is None
    assert [r.levelno for r in caplog.records if "no-such-model" in r.getMessage()] == [logging.INFO]
    caplog.clear()

    def broken(name: str) -> object:
        raise KeyError(name)

    monkeypatch.setattr("tokenmill.planner.catalog.load_model", broken)
    with caplog.at_level(logging.INFO, logger="tokenmill.doctor"):
        assert PlannerPredictor()(OBS, CLIENT, CANDIDATE) is None
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
