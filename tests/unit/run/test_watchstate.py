"""Watching flows one way: the monitor hands the tracker a frozen state, and the snapshot is built from it alone."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tests.helpers.dispatch import prompts
from tests.helpers.watch import dispatcher, job
from tokenmill.doctor.predict import Expected
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.snapshot import RecordedVerdict
from tokenmill.run.progress import Tracker
from tokenmill.run.watch import RunMonitor
from tokenmill.run.watchstate import UNWATCHED, WatchState, frozen_map

URL = "http://127.0.0.1:9"
PROGRESS = Path(__file__).resolve().parents[3] / "src" / "tokenmill" / "run" / "progress.py"


def test_the_monitor_s_state_is_a_copy_later_rounds_do_not_change(tmp_path: Path) -> None:
    spec = job(tmp_path)
    mon = RunMonitor(spec, dispatcher(spec), tmp_path / "out", "run1")
    mon.cpu_share, mon.planned = 0.25, {URL: 100.0}
    state = mon.state()
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.cpu = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        state.planned[URL] = 1.0  # type: ignore[index]
    mon.cpu_share = 0.9
    mon.planned[URL] = 5.0
    mon.expected = {URL: Expected("h200", 1.0, 2.0, 0.5)}
    assert state.cpu == 0.25 and dict(state.planned) == {URL: 100.0} and not state.expected
    assert state.max_tokens == spec.sampling.max_tokens and state.views == tuple(mon.fleet.views)


async def test_the_snapshot_is_built_from_the_handed_state_and_the_dispatcher_alone(tmp_path: Path) -> None:
    d = dispatcher(job(tmp_path))
    assert await d.run(prompts(4))
    view = ServerView(URL, None, None, True, None, running=3.0, queued=1.0, kv_usage=0.4, max_running=8,
                      decode_tok_s=120.0, decoded_tokens=600.0, scrapes=2)  # fmt: skip
    verdict = RecordedVerdict("kv-bound", "KV bound", "KV cache", "warning", "", URL, "KV bound")
    state = WatchState(
        views=(view,), verdicts=(verdict,), binding="KV cache", cpu=0.3, loop_lag_s=0.02, autotune="tuning",
        answers=4, truncated=1, mean_output=5.0, max_tokens=64, conversation_turns="first",
        planned=frozen_map({URL: 10.0}), expected=frozen_map({URL: Expected("h200", 200.0, 400.0, 0.6)}),
    )  # fmt: skip
    tracker = Tracker(d)
    tracker.total = 10
    snap = tracker.snapshot(state)
    (row,) = snap.servers
    assert (row.healthy, row.running, row.kv_usage, row.decode_tok_s) == (True, 3.0, 0.4, 120.0)
    assert (row.expected_tok_s, row.ceiling_tok_s, row.gpu) == (200.0, 400.0, "h200")
    assert snap.verdicts == (verdict,) and snap.binding == "KV cache" and snap.cpu == 0.3
    assert (snap.answers, snap.truncated, snap.max_tokens, snap.autotune) == (4, 1, 64, "tuning")
    assert snap.decode_tok_s == 120.0 and snap.completed == 4
    bare = Tracker(d).snapshot(UNWATCHED)
    assert bare.servers[0].healthy is None and bare.verdicts == () and bare.cpu is None


def test_the_tracker_names_no_monitor() -> None:
    """progress.py neither imports the monitor nor takes one: what it knows of the watch is the WatchState."""
    tree = ast.parse(PROGRESS.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "tokenmill.run.watch" not in imported
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args
    }
    assert "monitor" not in names
